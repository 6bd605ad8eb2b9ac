"""The model sampler's one-setting pass on a study built by hand (real Optuna trials, the e2e space):
with two trials in flight it does not launch a move that would repeat a failure it has seen."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from core.types import RunStatus
from tests.conftest import FIXTURES
from tuner.coordinate import CoordinateSampler
from tuner.space_loader import load_space
from tuner.whole_config import PASS_MARK

SPACE = load_space(FIXTURES / "e2e-space.yaml")
EP_2 = "server exited with code 1 during startup: AssertionError: ep_size 2 is not supported by this build"


def c(runner: str, ep: int = 1, graphs: int = 16, checkpoint: str = "slow") -> dict[str, Any]:
    return {"checkpoint": checkpoint, "moe_runner_backend": runner, "ep_size": ep, "cuda_graph_max_bs": graphs}


def pass_study(history: list[tuple[dict[str, Any], float | str | None]]) -> optuna.Study:
    """Trials of the pass in order: a reading, a failure's reason (``str``) or None (in flight)."""
    study = optuna.create_study(direction="maximize")
    dists = {p.name: p.distribution() for p in SPACE.params}
    for params, outcome in history:
        if outcome is None:
            trial = optuna.trial.create_trial(params=params, distributions=dists, state=TrialState.RUNNING,
                                              system_attrs={PASS_MARK: True})
        elif isinstance(outcome, str):
            failure = {"status": RunStatus.INFEASIBLE, "failure_kind": "config_error", "failure_reason": outcome}
            trial = optuna.trial.create_trial(params=params, distributions=dists, value=0.0, user_attrs=failure,
                                              system_attrs={PASS_MARK: True})
        else:
            trial = optuna.trial.create_trial(params=params, distributions=dists, value=outcome,
                                              user_attrs={"status": RunStatus.OK}, system_attrs={PASS_MARK: True})
        study.add_trial(trial)
    return study


def test_a_move_that_keeps_every_setting_a_failure_named_is_not_launched_again() -> None:
    """While marlin ran, the pass walked EP from triton, and EP 2 failed with a log naming only
    ``ep_size``. marlin then wins the runner's turn: EP 2 from marlin keeps all the log named, so the
    pass goes on to the CUDA-graph size instead of paying a second failed launch."""
    walked: list[tuple[dict[str, Any], float | str | None]] = [
        (c("auto"), 10.0), (c("auto", checkpoint="fast"), 9.0), (c("triton"), 10.2),
        (c("triton", 2), EP_2),  # proposed from triton while marlin ran
        (c("marlin"), 10.5)]
    sampler = CoordinateSampler(SPACE, blocked=lambda p: False, passes=1, follow_best=True,
                                skip_foretold=True)
    trials = pass_study(walked).get_trials()
    assert sampler.propose(trials, number=len(walked)) == c("marlin", graphs=32)
    plain = CoordinateSampler(SPACE, blocked=lambda p: False, passes=1, follow_best=True)
    assert plain.propose(trials, number=len(walked)) == c("marlin", 2), "the baseline walks as by hand"

    ran = [*walked[:3], (c("triton", 2), EP_2), (c("auto", 2), 9.5), (c("marlin"), 10.5)]
    assert sampler.propose(pass_study(ran).get_trials(), number=len(ran)) == c("marlin", 2), \
        "a launch with EP 2 ran: the log's setting alone does not explain the failure"
