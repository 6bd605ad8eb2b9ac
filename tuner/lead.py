"""Is the best configuration ahead of the runner-up by more than a launch's noise?

A real SGLang reads one configuration 5-23% apart from launch to launch on a busy host
(docs/real-gpu.md), so the first two of a ranking may be in either order. The sweep measures its own
launch noise where it launched a configuration more than once (``--confirm``, re-measured surprises):
the pooled standard deviation of log tok/s@C16 over those configurations (a surprise was measured again
because it read low, so it leans the estimate high: the verdict errs towards "within the noise").
The lead is settled when
the log ratio of the two medians is at least :data:`LEAD_SIGMAS` standard errors of that difference.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from enum import StrEnum

from tuner.results import SweepResults

LEAD_SIGMAS = 2.0  # a lead this many standard errors of the two medians' difference is settled


class LeadVerdict(StrEnum):
    """What the sweep's readings say about the order of its first two configurations."""

    SETTLED = "settled"  # ahead by LEAD_SIGMAS standard errors or more
    WITHIN_NOISE = "within_noise"  # the runner-up may be the faster one
    NOISE_UNKNOWN = "noise_unknown"  # no configuration was measured twice: the noise is not known


@dataclass(frozen=True)
class LaunchNoise:
    """The sweep's launch-to-launch noise: pooled sd of log tok/s@C16 (about a share) over the
    ``configurations`` measured more than once, ``readings`` readings in all."""

    sd: float
    configurations: int
    readings: int


@dataclass(frozen=True)
class Lead:
    """The best configuration against the runner-up: ``margin`` = best / runner-up - 1 (by the scores
    the sweep ranks by), each with its number of readings, and the noise they are judged against."""

    best: int  # trial number of the best configuration's first run
    runner_up: int
    margin: float
    best_readings: int
    runner_up_readings: int
    noise: LaunchNoise | None

    @property
    def standard_errors(self) -> float | None:
        """The lead in standard errors of the difference of the two medians (None: noise not known)."""
        if self.noise is None:
            return None
        se = self.noise.sd * math.sqrt(1 / self.best_readings + 1 / self.runner_up_readings)
        return math.inf if se == 0 else math.log1p(self.margin) / se

    @property
    def json_standard_errors(self) -> float | None:
        """:attr:`standard_errors` as JSON can hold it (an exact tie of every repeat reads None)."""
        z = self.standard_errors
        return z if z is None or math.isfinite(z) else None

    @property
    def verdict(self) -> LeadVerdict:
        """Settled, within the noise, or not known (see :class:`LeadVerdict`)."""
        z = self.standard_errors
        if z is None:
            return LeadVerdict.NOISE_UNKNOWN
        return LeadVerdict.SETTLED if z >= LEAD_SIGMAS else LeadVerdict.WITHIN_NOISE


def launch_noise(results: SweepResults) -> LaunchNoise | None:
    """Pooled launch-to-launch sd of log tok/s@C16 over the configurations measured more than once;
    None where none was."""
    squares, freedom, configurations, readings = 0.0, 0, 0, 0
    for run in results.measured():
        logs = [math.log(v) for v in results.samples(run.config_key) if v > 0]
        if len(logs) < 2:
            continue
        squares += statistics.variance(logs) * (len(logs) - 1)
        freedom += len(logs) - 1
        configurations += 1
        readings += len(logs)
    if not freedom:
        return None
    return LaunchNoise(math.sqrt(squares / freedom), configurations, readings)


def lead(results: SweepResults) -> Lead | None:
    """The best configuration's lead over the runner-up; None with fewer than two measured."""
    ranked = results.measured()
    if len(ranked) < 2:
        return None
    best, second = ranked[0], ranked[1]
    low = results.score(second)
    margin = results.score(best) / low - 1 if low > 0 else math.inf
    return Lead(best.trial_number, second.trial_number, margin, len(results.samples(best.config_key)),
                len(results.samples(second.config_key)), launch_noise(results))


def describe(found: Lead) -> str:
    """One line for ``tuner show`` and the report: the lead, the noise it is judged against, what to do."""
    ahead = f"trial {found.best} is {found.margin:.1%} ahead of trial {found.runner_up}"
    noise = found.noise
    if noise is None:
        return (f"{ahead}; no configuration was measured twice, so the launch noise is not known (a busy host "
                "reads one configuration 5-23% apart): --confirm 2 measures the two again")
    measured = f"launch noise (sd {noise.sd:.1%} over {noise.configurations} configuration(s) measured more than once)"
    if noise.sd == 0:
        return f"{ahead}; the {noise.configurations} configuration(s) measured more than once read alike each time"
    if found.verdict is LeadVerdict.SETTLED:
        return f"{ahead}: {found.standard_errors:.1f} standard errors of the {measured}"
    if min(found.best_readings, found.runner_up_readings) < 2:
        return (f"{ahead}, within the {measured}: the runner-up may be the faster one; "
                "--confirm 2 measures the two again")
    return f"{ahead}, within the {measured} though both were: the two are as fast as this sweep can tell"
