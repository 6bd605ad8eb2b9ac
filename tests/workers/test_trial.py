"""One trial end to end without Ray: TrialRunner against the simulated engine."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from core.flags import FlagTable
from core.types import BenchConfig, Config, EngineSpec, FailureKind, GateConfig, GatePrompt, TrialSpec
from tests.conftest import wait_for
from workers.trial import TrialRunner

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCENARIO = FIXTURES / "e2e-scenario.yaml"
GATE = GateConfig(prompts=(GatePrompt(text="What is 17*23?", expect="391"),))
BENCH = BenchConfig(concurrency=8, input_len=16, output_len=32, warmup_s=0.2, duration_s=0.8)


def _spec(n: int, flags: dict[str, object], tmp_path: Path, bench: BenchConfig = BENCH,
          scenario: Path = SCENARIO) -> TrialSpec:
    return TrialSpec(trial_number=n, config=Config(params={}, flags={"model_path": "/m/slow", **flags}),
                     engine=EngineSpec(kind="sim", python=sys.executable, scenario=str(scenario)),
                     bench=bench, gate=GATE, startup_timeout_s=20, log_dir=str(tmp_path))


@pytest.fixture
def runner() -> TrialRunner:
    return TrialRunner(FlagTable.bundled(), "test-node", ("0", "1"))


def test_a_good_trial_is_measured(runner: TrialRunner, tmp_path: Path) -> None:
    phases: list[str] = []
    result = runner.run(_spec(1, {"model_path": "/m/fast"}, tmp_path), on_phase=phases.append)
    assert result.ok and result.bench is not None and result.bench.tok_s > 0
    assert result.gate is not None and result.gate.passed
    assert result.startup_s is not None and result.startup_s > 0.3
    assert phases == ["launching", "gate", "warm-up", "measuring", "stopping"]
    assert "--model-path" in result.argv and "--port" in result.argv
    assert "The server is fired up" in result.server_log
    assert runner.phase.phase == "idle"
    assert result.ran_as == {}, "the server's /server_info says it runs what it was asked"


def test_a_trial_records_what_the_server_runs_otherwise_than_asked(runner: TrialRunner, tmp_path: Path) -> None:
    scenario = tmp_path / "adjusting.yaml"  # as SGLang does with an all-to-all backend
    scenario.write_text(SCENARIO.read_text().replace("effects:", "adjustments:\n  - {match: {moe_a2a_backend: "
                                                      "deepep}, sets: {ep_size: 2}}\neffects:", 1))
    flags = {"tp_size": 2, "ep_size": 1, "moe_a2a_backend": "deepep"}
    result = runner.run(_spec(3, flags, tmp_path, scenario=scenario))
    assert result.ok and result.ran_as == {"ep_size": 2}


@pytest.mark.parametrize(("flags", "kind"), [
    ({"cuda_graph_max_bs": 64}, FailureKind.OOM),
    ({"model_path": "/m/fast", "moe_runner_backend": "marlin"}, FailureKind.GATE_FAILED),
    ({"moe_runner_backend": "marlinn"}, FailureKind.BAD_FLAG),
])
def test_failures_have_a_kind_and_evidence(flags: dict[str, object], kind: FailureKind, runner: TrialRunner,
                                           tmp_path: Path) -> None:
    result = runner.run(_spec(2, flags, tmp_path))
    assert result.failure_kind == kind and not result.ok
    assert result.failure_reason
    if kind == FailureKind.OOM:
        assert "OutOfMemoryError" in result.log_tail
    if kind == FailureKind.GATE_FAILED:
        assert "one token repeated" in result.failure_reason


def test_runtime_death_is_classified_from_the_log(runner: TrialRunner, tmp_path: Path) -> None:
    scenario = tmp_path / "nccl.yaml"
    scenario.write_text("name: n\ntime_scale: 100\nbase: {tok_s_c16: 20, ttft_ms: 100, startup_s: 20}\n"
                        "failures:\n  - {match: {ep_size: 2}, at: runtime, after_requests: 5,\n"
                        "     log: 'RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:3385, unhandled cuda error'}\n"
                        "responses:\n  - {prompt: '17', text: '391'}\n")
    bench = BenchConfig(concurrency=8, input_len=16, output_len=32, warmup_s=0.2, duration_s=2.0)
    result = runner.run(_spec(3, {"ep_size": 2}, tmp_path, bench, scenario))
    assert result.failure_kind == FailureKind.NCCL
    assert "server died during the benchmark" in result.failure_reason


def test_interrupt_stops_the_server_and_marks_the_trial(runner: TrialRunner, tmp_path: Path) -> None:
    bench = BenchConfig(concurrency=8, input_len=16, output_len=32, warmup_s=0.2, duration_s=30.0)
    holder: dict[str, object] = {}
    thread = threading.Thread(target=lambda: holder.setdefault("r", runner.run(_spec(4, {}, tmp_path, bench))))
    thread.start()
    wait_for(lambda: runner.phase.phase == "measuring", 30, "the measurement to start")
    runner.interrupt()
    thread.join(20)
    assert not thread.is_alive()
    result = holder["r"]
    assert getattr(result, "failure_kind", None) == FailureKind.INTERRUPTED


def test_secrets_are_scrubbed_from_logs_on_disk_and_in_the_result(runner: TrialRunner, tmp_path: Path) -> None:
    spec = _spec(5, {"model_path": "/m/fast", "api_key": "sk-topsecret-123"}, tmp_path)
    result = runner.run(spec)
    assert result.ok
    on_disk = (tmp_path / "trial-0005.log").read_text()
    assert "api_key='<redacted>'" in on_disk and "sk-topsecret-123" not in on_disk
    assert "sk-topsecret-123" not in result.server_log
    assert "sk-topsecret-123" in result.argv  # the server itself got the real value


def test_a_missing_python_is_an_infrastructure_failure(runner: TrialRunner, tmp_path: Path) -> None:
    spec = _spec(6, {}, tmp_path)
    spec = TrialSpec(trial_number=6, config=spec.config, engine=EngineSpec(kind="sglang", python="/nonexistent/py"),
                     bench=spec.bench, gate=spec.gate, startup_timeout_s=5, log_dir=str(tmp_path))
    result = runner.run(spec)
    assert result.failure_kind == FailureKind.INFRASTRUCTURE
    assert "cannot start /nonexistent/py" in result.failure_reason


def test_a_trial_measures_at_further_concurrencies_after_its_benchmark(runner: TrialRunner, tmp_path: Path) -> None:
    import dataclasses

    phases: list[str] = []
    spec = dataclasses.replace(_spec(4, {"model_path": "/m/fast"}, tmp_path), more_concurrencies=(1, 4))
    result = runner.run(spec, on_phase=phases.append)
    assert result.ok and result.bench is not None and result.bench.concurrency == 8
    assert [b.concurrency for b in result.curve] == [1, 4]
    assert all(b.tok_s > 0 and b.completed > 0 for b in result.curve)
    assert result.curve[0].per_user_tok_s > result.bench.per_user_tok_s * 0.9  # one stream is not slower per user
    assert "measuring at C1" in phases and "measuring at C4" in phases
