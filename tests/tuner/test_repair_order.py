"""The one-setting pass repairs a failed move at the value its log asks for first, through the real
sweep loop (scripted launches): a message that says what it needs costs one failed launch."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from core.types import Config, FailureKind
from db.store import Store
from tests.conftest import FIXTURES
from tests.scripted import scripted_sweep
from tuner.live import SweepView
from tuner.study import Sweep
from tuner.sweep_state import SweepOptions

REASON = ("server exited with code 1 during startup: AssertionError: the marlin MoE runner needs "
          "cuda_graph_max_bs of at least 64, got {got}")


def script(config: Config, before: int) -> float | tuple[FailureKind, str]:
    """marlin runs only with CUDA graphs to 64 and is then the fastest runner."""
    runner, graphs = config.params.get("moe_runner_backend", "auto"), config.params.get("cuda_graph_max_bs", 16)
    if runner == "marlin" and graphs < 64:
        return FailureKind.CONFIG_ERROR, REASON.format(got=graphs)
    return 10.0 + (5.0 if runner == "marlin" else 0.0) + graphs / 100


def test_a_failed_move_is_repaired_at_the_value_the_log_names(tmp_path: Path) -> None:
    opts = SweepOptions(space_path=str(FIXTURES / "e2e-space.yaml"), db_path=str(tmp_path / "t.db"), budget=8,
                        seed=0, study_name="repair", sampler="coordinate")
    results, _ = scripted_sweep(opts, script, io.StringIO())
    launched = [r for r in results.runs if r.status.launched and r.params]  # the baseline has none
    first = next(i for i, r in enumerate(launched) if r.failure_kind)
    assert launched[first].params["moe_runner_backend"] == "marlin"
    repair = launched[first + 1].params
    assert (repair["moe_runner_backend"], repair["cuda_graph_max_bs"]) == ("marlin", 64), \
        "the repair tries cuda_graph_max_bs 64, which the log names, before 32"
    assert not any(r.params["moe_runner_backend"] == "marlin" and r.params["ep_size"] == 1
                   and r.params["cuda_graph_max_bs"] == 32 for r in launched[:first + 3]), \
        "once the named value ran, the repair does not go on to the value the log did not name"


def test_a_failing_start_moves_on_from_a_setting_whose_change_failed_the_same_way(tmp_path: Path) -> None:
    """The first values crash (a log naming nothing) because of the last setting: once another value
    of a setting crashed the same way, the pass leaves that setting's remaining values untried."""

    def crashes_at_small_graphs(config: Config, before: int) -> float | tuple[FailureKind, str]:
        if config.params.get("cuda_graph_max_bs", 16) == 16:
            return FailureKind.CRASHED, "server exited with code 139 during startup: Segmentation fault (core dumped)"
        return 10.0 + config.params.get("cuda_graph_max_bs", 16) / 100

    opts = SweepOptions(space_path=str(FIXTURES / "e2e-space.yaml"), db_path=str(tmp_path / "t.db"), budget=8,
                        seed=0, study_name="start", sampler="coordinate")
    results, _ = scripted_sweep(opts, crashes_at_small_graphs, io.StringIO())
    launched = [r for r in results.runs if r.status.launched and r.params]
    first_ok = next(i for i, r in enumerate(launched) if not r.failure_kind)
    runners = [r.params["moe_runner_backend"] for r in launched[:first_ok]]
    assert runners.count("auto") >= 1 and "triton" in runners, runners
    assert "marlin" not in runners, "triton crashed as auto did: marlin is not tried before a launch runs"
    assert launched[first_ok].params["cuda_graph_max_bs"] != 16


CRASHING_START_SCENARIO = """\
name: crashing-start
gpu: {name: Test GPU, arch: sm_90, count: 4, memory_gb: 80}
time_scale: 100
base: {tok_s_c16: 20.0, ttft_ms: 200, startup_s: 40}
effects:
  - {match: {ep_size: 2}, tok_s: 1.1}
failures:
  - {match: {moe_runner_backend: marlin}, at: startup, exit_code: 139, log: "Segmentation fault (core dumped)"}
noise: {cv: 0.0}
responses:
  - {prompt: "17\\\\s*\\\\*\\\\s*23", text: "391"}
"""

CRASHING_START_SPACE = """\
name: crashing-start
engine: sim
scenario: crashing-start.scenario.yaml
gpus_per_trial: 2
base: {model_path: /m/x, tp_size: 2}
params:
  moe_runner_backend: {choices: [marlin, auto]}
  ep_size: {choices: [1, 2]}
  cuda_graph_max_bs: {choices: [16, 32, 64]}
  schedule_policy: {choices: [fcfs, lpm]}
"""


def test_with_two_in_flight_a_failing_start_is_left_for_the_move_that_may_fix_it(tmp_path: Path) -> None:
    """The first values crash (a log naming nothing) because of the first setting; a crash ends fast,
    a launch that runs takes minutes. With two trials in flight, the pass goes on from the move being
    measured instead of launching every other move from the crashing start while it runs (each would
    crash alike): the offline loop, two GPU groups."""
    (tmp_path / "crashing-start.scenario.yaml").write_text(CRASHING_START_SCENARIO)
    (tmp_path / "space.yaml").write_text(CRASHING_START_SPACE)
    opts = SweepOptions(space_path=str(tmp_path / "space.yaml"), db_path=str(tmp_path / "t.db"), budget=8,
                        seed=0, study_name="start2", sampler="coordinate", offline=True, max_groups=2, gpus=4)
    row = Sweep(opts, lambda n, b, s: SweepView(Console(file=io.StringIO()), n, b, s)).run()
    store = Store(opts.db_path)
    try:
        launched = [r for r in store.runs(row.id) if r.status.launched and r.params]
    finally:
        store.close()
    crashed = [r.params for r in launched if r.failure_kind]
    assert crashed and all(p["moe_runner_backend"] == "marlin" for p in crashed)
    assert len(crashed) == 1, f"only the start crashes; moves from it were not launched while auto ran: {crashed}"


NO_EP_SPACE = """\
name: no-ep
engine: sim
scenario: e2e-scenario.yaml
gpus_per_trial: 8
base: {model_path: /m/slow, tp_size: 8}
params:
  moe_runner_backend: {choices: [auto, triton, marlin]}
  ep_size: {choices: [1, 2, 4, 8]}
  cuda_graph_max_bs: {choices: [16, 32]}
benchmark: {concurrency: 16, input_len: 32, output_len: 64, warmup_s: 0.3, duration_s: 1.0, request_timeout_s: 5}
"""


def test_a_move_that_fails_for_a_kept_setting_is_not_tried_at_its_other_values(tmp_path: Path) -> None:
    """marlin wins the runner's turn, then EP 2 fails with a log that blames marlin and names no EP
    size: moving EP to 4 or 8 with marlin kept would fail alike, so the pass launches those EP sizes
    with another runner instead (one failure, not three)."""

    def marlin_without_ep(config: Config, before: int) -> float | tuple[FailureKind, str]:
        runner, ep = config.params.get("moe_runner_backend", "auto"), config.params.get("ep_size", 1)
        if runner == "marlin" and ep > 1:
            return (FailureKind.CONFIG_ERROR, "server exited with code 1 during startup: "
                    "AssertionError: marlin MoE does not support expert parallelism")
        return 10.0 + (5.0 if runner == "marlin" else 0.0) + ep / 10

    (tmp_path / "e2e-scenario.yaml").write_text((FIXTURES / "e2e-scenario.yaml").read_text())
    (tmp_path / "space.yaml").write_text(NO_EP_SPACE)
    opts = SweepOptions(space_path=str(tmp_path / "space.yaml"), db_path=str(tmp_path / "t.db"), budget=10,
                        seed=0, study_name="no-ep", sampler="coordinate")
    results, _ = scripted_sweep(opts, marlin_without_ep, io.StringIO())
    runs = [r for r in results.runs if r.status.launched and r.params]
    launched, failed = [r.params for r in runs], [r.params for r in runs if r.failure_kind]
    assert [(p["moe_runner_backend"], p["ep_size"]) for p in failed] == [("marlin", 2)], failed
    assert {p["ep_size"] for p in launched if p["moe_runner_backend"] != "marlin"} >= {2, 4, 8}, \
        "each EP size is measured, with another runner than the one the log blames"
