"""The scenario as a function, no server: configuration -> modelled tok/s@C16 or failure.

Used to benchmark the sampler on thousands of trials (``benchmarks/sampler_efficiency.py``). The
configuration goes through the same path as a launch (rendered to SGLang options, parsed by the
simulated server's parser), so defaults and renamed flags match exactly what the server would see.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.flags import FlagTable
from tuner.render import render_args
from workers.sim.args import build_parser, options_by_dest
from workers.sim.scenario import Outcome, Scenario, evaluate, load_scenario
from workers.types import Config


@dataclass(frozen=True)
class Verdict:
    """What a benchmark of this configuration would report (hardware units, not time-scaled)."""

    tok_s: float | None
    failure: str | None  # startup | warmup | runtime | output | hang, None when measured
    outcome: Outcome


class OfflineModel:
    """Evaluate configurations against a scenario without starting anything."""

    def __init__(self, scenario: Scenario | str | Path) -> None:
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.table = FlagTable.bundled(self.scenario.sglang_version)
        self.parser = build_parser(self.scenario.sglang_version)

    def outcome(self, config: Config) -> Outcome:
        """The modelled outcome of one configuration."""
        argv = render_args(config.flags, self.table)
        options = options_by_dest(self.parser.parse_args(argv))
        return evaluate(self.scenario, options, dict(config.env))

    def verdict(self, config: Config, concurrency: int = 16, output_len: int = 256) -> Verdict:
        """Modelled closed-loop tok/s (as the benchmark measures it), or the failure phase."""
        outcome = self.outcome(config)
        if outcome.failure is not None:
            return Verdict(None, outcome.failure.at, outcome)
        return Verdict(outcome.expected_tok_s(concurrency, output_len, self.scenario.saturation_c), None, outcome)
