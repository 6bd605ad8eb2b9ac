"""Claims between drivers on real SQLite: one launch per configuration, the budget exact across
drivers, and a dead driver's claims released (its process really killed)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event

from core.types import Config, FailureKind, RunStatus, TrialResult
from db.coordination import Claim, Coordination, DriverId
from db.store import Store

_OTHER_DRIVER = """
import sys, time
from db.coordination import Coordination
from db.store import Store
store = Store(sys.argv[1])
coord = Coordination(store.engine, int(sys.argv[2]), sys.argv[1])
coord.register()
print(coord.claim("held-elsewhere", 99, counted=True, budget=10).value, flush=True)
time.sleep(600)
"""


def _store(tmp_path: Path) -> tuple[Store, int]:
    store = Store(tmp_path / "t.db")
    sweep = store.ensure_sweep("s", space_path="x", space_text="", engine="sim", sglang_version="0.5.23",
                               gpu_name="g", gpu_arch=None, gpu_count=1, driver="d", hosts=[], budget=3,
                               roofline_tok_s=None, time_scale=1.0)
    return store, sweep.id


def _config(name: str) -> Config:
    return Config({"x": name}, {"x": name})


def test_one_claim_per_configuration_and_the_budget_counts_every_driver(tmp_path: Path) -> None:
    store, sweep = _store(tmp_path)
    me = Coordination(store.engine, sweep, "t.db")
    me.register()
    other = subprocess.Popen([sys.executable, "-c", _OTHER_DRIVER, str(tmp_path / "t.db"), str(sweep)],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "claimed"
        assert me.claim("held-elsewhere", 1, counted=True, budget=10) is Claim.TAKEN
        assert me.claimed("held-elsewhere") and me.committed() == 1
        assert me.claim("a", 2, counted=True, budget=3) is Claim.CLAIMED
        assert me.claim("b", 3, counted=True, budget=3) is Claim.CLAIMED
        assert me.claim("c", 4, counted=True, budget=3) is Claim.BUDGET_SPENT  # 1 there + 2 here
        assert me.claim("c", 4, counted=False, budget=3) is Claim.CLAIMED  # a confirmation is not counted
        assert len(me.alive()) == 2
    finally:
        other.kill()
        other.wait()
    assert me.forget_the_dead() == {str(me.me)}  # killed: its claim is released at once, on this host
    assert not me.claimed("held-elsewhere") and me.committed() == 2


def test_recording_a_run_releases_its_claim(tmp_path: Path) -> None:
    store, sweep = _store(tmp_path)
    me = Coordination(store.engine, sweep, "t.db")
    me.register()
    key = _config("a").key()
    assert me.claim(key, 0, counted=True, budget=1) is Claim.CLAIMED
    result = TrialResult.unreported(0, _config("a"), node="n", gpu_ids=(), sglang_version="v", started_at=0.0,
                                    kind=FailureKind.INTERRUPTED, reason="stopped")
    store.record(sweep, result, _config("a"), status=RunStatus.INTERRUPTED)
    assert not me.claimed(key) and me.committed() == 0
    me.leave()
    assert me.alive() == set()


def test_a_queued_trial_popped_by_two_drivers_is_owned_by_one(tmp_path: Path) -> None:
    import optuna

    store, sweep = _store(tmp_path)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 't.db'}", study_name="s")
    study.enqueue_trial({"x": 1.0})
    trial = study.ask()  # what both drivers read as theirs when their pops of the queue interleave
    first, second = Coordination(store.engine, sweep, "t.db"), Coordination(store.engine, sweep, "t.db")
    assert first.own_trial(trial._trial_id, "driver")
    assert not second.own_trial(trial._trial_id, "driver"), "the second driver leaves it to the first"
    assert study.trials[0].system_attrs["driver"] == str(first.me)


def test_a_driver_that_registers_and_claims_while_the_dead_are_sought_is_not_taken_for_dead(tmp_path: Path) -> None:
    store, sweep = _store(tmp_path)
    me = Coordination(store.engine, sweep, "t.db")
    me.register()
    other = Coordination(store.engine, sweep, "t.db")
    other.me = DriverId("another-host", 7, 0)  # alive while its heartbeat is fresh
    started: list[bool] = []

    def the_other_starts_once_the_drivers_are_read(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not started and statement.lstrip().startswith("SELECT") and "FROM tuner_drivers" in statement:
            started.append(True)
            other.register()
            assert other.claim("being-launched", 5, counted=True, budget=10) is Claim.CLAIMED

    event.listen(store.engine, "after_cursor_execute", the_other_starts_once_the_drivers_are_read)
    try:
        me.forget_the_dead()
    finally:
        event.remove(store.engine, "after_cursor_execute", the_other_starts_once_the_drivers_are_read)
    assert started and me.alive() == {str(me.me), str(other.me)}, "the newcomer's row stays"
    assert me.claimed("being-launched"), "and so does its claim"


def test_a_driver_taken_for_dead_while_it_stalled_announces_itself_again(tmp_path: Path) -> None:
    store, sweep = _store(tmp_path)
    me, other = Coordination(store.engine, sweep, "t.db"), Coordination(store.engine, sweep, "t.db")
    other.me = DriverId("another-host", 7, 0)
    me.register()
    other.register()
    me.leave()  # what another driver's forget_the_dead does to a driver silent for STALE_S
    assert str(me.me) not in other.alive()
    me._beaten = datetime.min  # its next heartbeat is due
    assert me.beat()
    assert str(me.me) in other.alive()
