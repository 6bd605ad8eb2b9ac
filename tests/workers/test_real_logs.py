"""Failure classification on trimmed real SGLang 0.5.17 server logs (one H200, the tiny model of
../shared/gpu-kit; captured by benchmarks/real_gpu/paths.py, see docs/real-gpu.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.types import FailureKind
from tests.conftest import FIXTURES
from workers.failures import diagnose

LOGS = FIXTURES / "real-logs"


@pytest.mark.parametrize(("log", "exit_code", "kind", "reason"), [
    ("oom-kv-cache-mem-fraction.log", -9, FailureKind.OOM,
     "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.001."),
    ("unsupported-trtllm-mha-sm90.log", 1, FailureKind.UNSUPPORTED,
     "ValueError: TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100)."),
    ("bad-flag-unrecognized.log", 2, FailureKind.BAD_FLAG,
     "sglang serve: error: unrecognized arguments: --disable-aiter-allreduce-fusion-in-decode"),
    ("scheduler-killed-mid-benchmark.log", -9, FailureKind.CRASHED,
     "[2026-11-30 15:20:17] Subprocess scheduler_0 (pid=1719) crashed with exit code -9."),
])
def test_each_real_failure_gets_its_kind_and_the_telling_line(log: str, exit_code: int, kind: FailureKind,
                                                              reason: str) -> None:
    got_kind, got_reason = diagnose(exit_code, (LOGS / log).read_text())
    assert got_kind == kind
    assert got_reason.startswith(reason), got_reason
    assert "kill_process_tree called" not in got_reason, "the line every such log ends with tells nothing"


def test_the_exit_code_decides_only_when_the_log_says_nothing() -> None:
    assert diagnose(-9, "")[0] == FailureKind.CRASHED
    assert diagnose(2, "usage: ...")[0] == FailureKind.BAD_FLAG
    assert diagnose(1, "Traceback\nRuntimeError: something odd\nexiting")[1] == "RuntimeError: something odd"


def test_the_simulator_prints_what_the_real_engine_printed() -> None:
    """Every failure the simulated engine can be told to print classifies like the real log it copies."""
    from workers.sim.offline import dying_log
    from workers.sim.scenario import FailureRule

    for log in sorted(Path(LOGS).glob("*.log")):
        kind, reason = diagnose(None, log.read_text())
        if kind == FailureKind.CRASHED:
            continue  # a kill from outside: nothing a scenario prints
        rule = FailureRule(match={}, at="startup", log=reason.split("] ", 1)[-1], exit_code=1)
        assert diagnose(1, "\n".join(dying_log(rule, 1)))[0] == kind, log.name
