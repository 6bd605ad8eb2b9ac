"""The scenario as a function, no server: configuration -> what one trial of it would report.

Used by the offline launcher (``tuner sweep --offline``) and the sampler benchmark. The
configuration goes through the same path as a launch (rendered to SGLang options, parsed by the
simulated server's parser), so defaults and renamed flags match exactly what the server would see.
A failure is reported as the simulated server would make the trial report it: the same log lines
(:func:`workers.sim.__main__.die`), classified by the same :func:`workers.failures.classify`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from core.flags import FlagTable
from core.render import render_args
from core.types import BenchConfig, Config, FailureKind
from workers.failures import classify, reason_line
from workers.sim.args import build_parser, options_by_dest
from workers.sim.scenario import FailureRule, Outcome, Scenario, evaluate, load_scenario

READY_PROBE_S = 0.2  # the readiness poll interval: what startup_s reads above the modelled time


@dataclass(frozen=True)
class Verdict:
    """What a benchmark of this configuration would report (hardware units, not time-scaled)."""

    tok_s: float | None
    failure: str | None  # startup | warmup | runtime | output | hang, None when measured
    outcome: Outcome


@dataclass(frozen=True)
class OfflineTrial:
    """One modelled trial, in the units a launch of the simulated server would measure (time-scaled)."""

    outcome: Outcome
    tok_s: float | None
    startup_s: float | None
    duration_s: float  # how long the trial would hold its GPUs
    failure_kind: FailureKind | None = None
    failure_reason: str = ""
    log: str = ""
    window_tok_s: tuple[float, ...] = ()  # each benchmark window's reading (tok_s is their median)


class OfflineModel:
    """Evaluate configurations against a scenario without starting anything."""

    def __init__(self, scenario: Scenario | str | Path) -> None:
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.table = FlagTable.bundled(self.scenario.sglang_version)
        self.parser = build_parser(self.scenario.sglang_version)

    def outcome(self, config: Config, launch_seed: int | None = None) -> Outcome:
        """The modelled outcome of one configuration (of one launch of it, with ``launch_seed``)."""
        argv = render_args(config.flags, self.table)
        options = options_by_dest(self.parser.parse_args(argv))
        return evaluate(self.scenario, options, dict(config.env), launch_seed)

    def verdict(self, config: Config, concurrency: int = 16, output_len: int = 256) -> Verdict:
        """Modelled closed-loop tok/s (as the benchmark measures it, no run noise), or the failure phase."""
        outcome = self.outcome(config)
        if outcome.failure is not None:
            return Verdict(None, outcome.failure.at, outcome)
        return Verdict(outcome.expected_tok_s(concurrency, output_len, self.scenario.saturation_c), None, outcome)

    def trial(self, config: Config, bench: BenchConfig, startup_timeout_s: float, launch_seed: int) -> OfflineTrial:
        """What one launch of ``config`` would report (see module docstring)."""
        scale = self.scenario.time_scale
        outcome = self.outcome(config, launch_seed)
        startup = outcome.startup_s / scale + READY_PROBE_S
        window = bench.warmup_s + bench.duration_s * bench.repeats
        rule = outcome.failure
        if rule is None:
            windows = self.window_readings(outcome, bench)
            return OfflineTrial(outcome, statistics.median(windows), startup, startup + window,
                                log="\n".join(outcome.notices), window_tok_s=windows)
        if (rule.at == "hang" and rule.after_requests == 0) or startup > startup_timeout_s:
            return OfflineTrial(outcome, None, None, startup_timeout_s, FailureKind.STARTUP_TIMEOUT,
                                f"server not ready after {startup_timeout_s:g} s (last log line: "
                                "Scheduler watchdog: no progress)")
        if rule.at == "output":
            return OfflineTrial(outcome, None, startup, startup + 0.5, FailureKind.GATE_FAILED,
                                "correctness gate failed: expected answer not found (garbage output)")
        if rule.at == "hang":
            return OfflineTrial(outcome, None, startup, startup + bench.request_timeout_s,
                                FailureKind.BENCHMARK_FAILED, f"requests timed out after {bench.request_timeout_s:g} s")
        return self._died(outcome, rule, startup, window)

    def window_readings(self, outcome: Outcome, bench: BenchConfig) -> tuple[float, ...]:
        """Each benchmark window's closed-loop tok/s (time-scaled), the launch's window drift over its span."""
        scale, noise = self.scenario.time_scale, self.scenario.noise
        readings = []
        for k in range(bench.repeats):
            start = (bench.warmup_s + k * bench.duration_s) * scale  # modelled seconds since ready
            drift = noise.mean_drift(outcome.launch_seed, start, start + bench.duration_s * scale)
            drifted = replace(outcome, noise_factor=outcome.noise_factor * drift)
            readings.append(drifted.expected_tok_s(bench.concurrency, bench.output_len,
                                                   self.scenario.saturation_c) * scale)
        return tuple(readings)

    def _died(self, outcome: Outcome, rule: FailureRule, startup: float, window: float) -> OfflineTrial:
        """The server exits: at startup, in warm-up, or during the benchmark."""
        code = rule.exit_code if rule.exit_code is not None else (1 if rule.at == "startup" else 137)
        log = "\n".join([*outcome.notices, *dying_log(rule, code)])
        kind, line = classify(code, log), reason_line(log)
        if rule.at == "runtime":
            return OfflineTrial(outcome, None, startup, startup + window / 2, kind,
                                f"server died during the benchmark (exit {code}): {line}", log)
        held = 0.3 * startup if rule.at == "startup" else startup
        return OfflineTrial(outcome, None, None, held, kind,
                            f"server exited with code {code} during startup: {line}", log)


def dying_log(rule: FailureRule, code: int) -> list[str]:
    """The lines the simulated server prints when ``rule`` kills it with exit ``code``."""
    lines = ["Initialization failed. warmup error: Traceback (most recent call last):"] if rule.at == "warmup" else []
    if code == 137:
        return [*lines, "Scheduler hit an exception: Traceback (most recent call last):",
                '  File "sglang/srt/managers/scheduler.py", line 3120, in run_scheduler_process',
                *(rule.log or "RuntimeError: simulated failure").splitlines(),
                "Received sigquit from a child process. It usually means the child failed."]
    return [*lines, "Traceback (most recent call last):", '  File "sglang/launch_server.py", line 32, in <module>',
            *(rule.log or "ValueError: simulated configuration error").splitlines()]
