"""`--confirm N`: the N best by median end up measured twice, even when a second measurement
reorders the leaders. The launches are scripted (a real store and a real Optuna study; only the
loop that would start servers is replaced by one that records the scripted measurement)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import optuna

from db.store import Store, SweepRow
from tests.conftest import bench_result
from tuner.results import SweepResults
from tuner.study import CONFIRM_ROUNDS, Sweep, SweepOptions, open_study
from workers.types import Config, TrialResult


class ScriptedSweep(Sweep):
    """A sweep whose launches return scripted tok/s: ``second[x]`` for a configuration's confirmation."""

    def __init__(self, store: Store, confirm: int, second: dict[str, float]) -> None:
        super().__init__(SweepOptions(space_path="unused.yaml", budget=3, confirm=confirm), view_factory=None)
        self.store = store
        self.second = second

    def measure(self, study: optuna.Study, sweep: SweepRow, x: str, tok_s: float,
                repeat_of: int | None = None) -> None:
        trial = study.ask()
        now = time.time()
        result = TrialResult(trial_number=trial.number, config_key=f"key-{x}", argv=("python3",), env={},
                             sglang_version="0.5.23", node="host", gpu_ids=("0",), started_at=now,
                             finished_at=now, bench=bench_result(tok_s))
        self.store.record(sweep.id, result, Config(params={"x": x}, flags={"x": x}), status="ok",
                          repeat_of=repeat_of)
        study.tell(trial, tok_s)

    def _loop(self, study: optuna.Study, sweep: SweepRow, space: Any, cluster: Any, view: Any,
              quota: Any) -> None:
        while quota.confirmations:
            waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))[0]
            x = waiting.system_attrs["fixed_params"]["x"]
            self.measure(study, sweep, x, self.second[x], repeat_of=waiting.user_attrs["repeat_of"])
            quota.confirmations -= 1


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, line: str) -> None:
        self.lines.append(line)


def _setup(tmp_path: Path, confirm: int, first: dict[str, float],
           second: dict[str, float]) -> tuple[ScriptedSweep, optuna.Study, SweepRow]:
    store = Store(tmp_path / "t.db")
    sweep = store.ensure_sweep("s", space_path="x.yaml", space_text="name: s", engine="sim",
                               sglang_version="0.5.23", gpu_name="g", gpu_arch="sm_120", gpu_count=1, driver="d",
                               hosts=["h"], budget=len(first), roofline_tok_s=None, time_scale=1.0)
    study = open_study(tmp_path / "t.db", "s", None)
    runner = ScriptedSweep(store, confirm, second)
    for x, tok_s in first.items():
        runner.measure(study, sweep, x, tok_s)
    return runner, study, sweep


def test_a_leader_that_drops_brings_the_new_leader_in(tmp_path: Path) -> None:
    runner, study, sweep = _setup(tmp_path, 1, first={"a": 30.0, "b": 29.0, "c": 20.0},
                                  second={"a": 20.0, "b": 28.0, "c": 20.0})
    view = Log()
    runner._confirm(study, sweep, None, None, view)  # type: ignore[arg-type]
    results = SweepResults(sweep, runner.store.runs(sweep.id))
    confirmed = [r.params["x"] for r in results.runs if r.repeat_of is not None]
    assert confirmed == ["a", "b"], "a fell to a median of 25, so b (29, measured once) was confirmed too"
    best = results.best()
    assert best is not None and best.params["x"] == "b" and results.samples(best.config_key) == [29.0, 28.0]
    runner._confirm(study, sweep, None, None, view)  # type: ignore[arg-type]
    assert len(runner.store.runs(sweep.id)) == 5, "nothing left to confirm: a second call launches nothing"
    runner.store.close()


def test_confirmation_rounds_are_bounded(tmp_path: Path) -> None:
    first = {x: 30.0 - i for i, x in enumerate("abcdefgh")}
    runner, study, sweep = _setup(tmp_path, 1, first=first, second=dict.fromkeys(first, 1.0))
    view = Log()
    runner._confirm(study, sweep, None, None, view)  # type: ignore[arg-type]
    repeats = [r for r in runner.store.runs(sweep.id) if r.repeat_of is not None]
    assert len(repeats) == CONFIRM_ROUNDS
    assert "the best may rest on one measurement" in view.lines[-1]
    runner.store.close()


def test_a_ranking_settled_by_the_last_round_gives_no_warning(tmp_path: Path) -> None:
    runner, study, sweep = _setup(tmp_path, 1, first={"a": 30.0, "b": 29.0, "c": 28.0, "d": 10.0},
                                  second={"a": 1.0, "b": 1.0, "c": 27.0, "d": 10.0})
    view = Log()
    runner._confirm(study, sweep, None, None, view)  # type: ignore[arg-type]
    results = SweepResults(sweep, runner.store.runs(sweep.id))
    assert [r.params["x"] for r in results.runs if r.repeat_of is not None] == ["a", "b", "c"]
    best = results.best()
    assert best is not None and best.params["x"] == "c" and len(results.samples(best.config_key)) == 2
    assert not any("still moves" in line for line in view.lines), view.lines
    runner.store.close()
