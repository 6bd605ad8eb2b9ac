"""Failures learned, through the real sweep loop (scripted launches): a proposal a confirmed rule
covers is answered without a launch (`avoided`, no budget), rules are stored and kept on resume."""

from __future__ import annotations

import io
from pathlib import Path

from core.types import Config, FailureKind
from tests.conftest import FIXTURES
from tests.scripted import ScriptedLauncher, scripted_sweep
from tuner.results import SweepResults
from tuner.study_db import open_study
from tuner.sweep_state import SweepOptions

REASON = ("server exited with code 1 during startup: AssertionError: the marlin runner cannot run the fast "
          "checkpoint with ep_size 2")


def script(config: Config, before: int) -> float | tuple[FailureKind, str]:
    p = config.params
    if p.get("moe_runner_backend") == "marlin" and p.get("checkpoint") == "fast" and p.get("ep_size") == 2:
        return FailureKind.CONFIG_ERROR, REASON
    return 10.0 + len(str(p))


def sweep(tmp_path: Path, budget: int, out: io.StringIO) -> tuple[SweepResults, ScriptedLauncher]:
    opts = SweepOptions(space_path=str(FIXTURES / "e2e-space.yaml"), db_path=str(tmp_path / "t.db"), budget=budget,
                        seed=1, study_name="learn")
    return scripted_sweep(opts, script, out)


def test_a_covered_proposal_is_avoided_and_costs_no_budget(tmp_path: Path) -> None:
    failing = {"checkpoint": "fast", "moe_runner_backend": "marlin", "ep_size": 2, "cuda_graph_max_bs": 16}
    study = open_study(tmp_path / "t.db", "learn")
    study.enqueue_trial(failing)  # the first proposal: it fails, and the log names three settings
    results, _ = sweep(tmp_path, 3, io.StringIO())
    [rule] = results.rules
    assert rule == ("checkpoint=fast with ep_size=2 with moe_runner_backend=marlin -> config_error, from trial 0 "
                    "(named by the log)")
    open_study(tmp_path / "t.db", "learn").enqueue_trial({**failing, "cuda_graph_max_bs": 32})
    out = io.StringIO()
    resumed, launcher = sweep(tmp_path, 4, out)
    assert "learned before: checkpoint=fast" in out.getvalue(), "a resumed sweep starts with its rules"
    avoided = [r for r in resumed.runs if r.status == "avoided"]
    assert len(avoided) == 1 and avoided[0].params["cuda_graph_max_bs"] == 32
    assert avoided[0].failure_kind == "config_error" and avoided[0].failure_reason.startswith("learned: ")
    assert sum(launcher.launches.values()) == 1, "the avoided proposal was not launched; one other was"
    assert len([r for r in resumed.runs if r.status.launched]) == 4, "the budget counts launches only"
    trial = open_study(tmp_path / "t.db", "learn", create=False).trials[avoided[0].trial_number]
    assert trial.user_attrs["status"] == "avoided" and trial.value == 0.0, "told to Optuna as infeasible"
