"""Taking over a dead driver's trials on real SQLite and a real Optuna study: a trial of a driver that
started while this one looked is left running, a dead driver's trial is failed and queued again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import TrialState

from db.coordination import Coordination, DriverId
from db.store import Store
from tuner.drivers import DRIVER_ATTR, recover


def _sweep(tmp_path: Path) -> tuple[Store, Any, optuna.Study]:
    store = Store(tmp_path / "t.db")
    sweep = store.ensure_sweep("s", space_path="x", space_text="", engine="sim", sglang_version="0.5.23",
                               gpu_name="g", gpu_arch=None, gpu_count=1, driver="d", hosts=[], budget=3,
                               roofline_tok_s=None, time_scale=1.0)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 't.db'}", study_name="s")
    return store, sweep, study


def _driver_elsewhere(store: Store, sweep_id: int, pid: int) -> Coordination:
    """A driver on another host (alive while its heartbeat is fresh)."""
    other = Coordination(store.engine, sweep_id, "t.db")
    other.me = DriverId("another-host", pid, 0)
    return other


def test_a_driver_that_registers_and_asks_while_the_live_set_is_read_keeps_its_trial(tmp_path: Path) -> None:
    store, sweep, study = _sweep(tmp_path)
    me = Coordination(store.engine, sweep.id, "t.db")
    me.register()
    other = _driver_elsewhere(store, sweep.id, 7)
    asked: list[int] = []
    read_live = me.forget_the_dead

    def live_then_another_driver_starts() -> set[str]:
        live = read_live()
        other.register()  # the other driver starts just after this one read who is alive
        trial = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 't.db'}").ask()
        asked.append(trial.number)  # ... and asks, its owner attribute not written yet
        return live

    me.forget_the_dead = live_then_another_driver_starts  # type: ignore[method-assign]
    recover(SimpleNamespace(study=study, coord=me, sweep=sweep), store)  # type: ignore[arg-type]
    assert asked and study.trials[asked[0]].state is TrialState.RUNNING, "another driver's new trial runs on"


def test_a_dead_drivers_running_trial_is_failed_and_queued_again(tmp_path: Path) -> None:
    store, sweep, study = _sweep(tmp_path)
    gone = _driver_elsewhere(store, sweep.id, 8)
    gone.register()
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    assert gone.own_trial(trial._trial_id, DRIVER_ATTR)
    gone.leave()  # its row gone: not among the live drivers
    me = Coordination(store.engine, sweep.id, "t.db")
    me.register()
    recover(SimpleNamespace(study=study, coord=me, sweep=sweep), store)  # type: ignore[arg-type]
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.FAIL, TrialState.WAITING], "failed, and its settings queued again"
    queued = study.trials[1]
    assert queued.system_attrs["fixed_params"] == trial.params and queued.user_attrs["retry_of"] == trial.number


def test_a_result_for_a_trial_another_driver_closed_is_still_recorded(tmp_path: Path) -> None:
    from core.types import Config, FailureKind, TrialResult
    from tuner.recording import Recorder, artifact_store

    store, sweep, study = _sweep(tmp_path)
    trial = study.ask()
    study.tell(trial.number, state=TrialState.FAIL)  # another driver took this one for dead
    config = Config({"x": "a"}, {"x": "a"})
    result = TrialResult.unreported(trial.number, config, node="n", gpu_ids=("0",), sglang_version="0.5.23",
                                    started_at=0.0, kind=FailureKind.CONFIG_ERROR, reason="refused --x a")
    run = Recorder(store, sweep, artifact_store(tmp_path / "t.db")).finish(study, trial, config, result,
                                                                            baseline=False)
    assert store.run(sweep.id, trial.number) == run and run.failure_reason == "refused --x a"
    assert study.trials[0].state is TrialState.FAIL and "status" not in study.trials[0].user_attrs
