"""Several `tuner sweep` drivers on one study share its work through the database.

Each driver registers itself (``tuner_drivers``) and beats a heartbeat. Before a launch it *claims*
the configuration (``tuner_launch_claims``): one statement that inserts the claim only while the
budget has room (runs with a verdict + counted claims < budget) and the unique (sweep, configuration)
key refuses a configuration another driver is launching. Recording the trial's run removes its
claim in the same transaction (``Store.record``). A driver is dead when its heartbeat is older than
``STALE_S``, or at once when it ran on this host and its process is gone (SIGKILL); its claims and
its RUNNING trials are then taken over by whoever looks next. On PostgreSQL the sweep's row is locked
(``FOR NO KEY UPDATE``) for the claim; on SQLite the single INSERT takes the write lock before it reads.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, cast

import psutil
from sqlalchemy import CursorResult, Engine, delete, select, text, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from core.errors import StoreError
from db.models import DriverRecord, LaunchClaim, SweepRecord

STALE_S = 90.0  # a heartbeat older than this: the driver is gone
BEAT_EVERY_S = 10.0

# Optuna's own table of trial attributes (same database): its (trial_id, key) pair is unique.
_OWN = text("INSERT INTO trial_system_attributes (trial_id, key, value_json) VALUES (:trial, :key, :value)")
_CLAIM = text("""
INSERT INTO tuner_launch_claims (sweep_id, config_key, trial_number, driver, counted)
SELECT CAST(:sweep AS INTEGER), CAST(:key AS VARCHAR(32)), CAST(:trial AS INTEGER), CAST(:driver AS VARCHAR(200)),
       CAST(:counted AS BOOLEAN)
WHERE (CAST(:uncounted AS BOOLEAN) OR (
    (SELECT count(*) FROM tuner_trial_runs
      WHERE sweep_id = CAST(:sweep AS INTEGER) AND status IN ('ok', 'infeasible')
        AND (repeat_of IS NULL OR remeasure))
  + (SELECT count(*) FROM tuner_launch_claims WHERE sweep_id = CAST(:sweep AS INTEGER) AND counted))
  < CAST(:budget AS INTEGER))
  AND NOT (CAST(:first AS BOOLEAN) AND EXISTS (SELECT 1 FROM tuner_trial_runs
      WHERE sweep_id = CAST(:sweep AS INTEGER) AND config_key = CAST(:key AS VARCHAR(32))
        AND status IN ('ok', 'infeasible') AND repeat_of IS NULL))
""")


class Claim(Enum):
    """What a claim to launch a configuration got."""

    CLAIMED = "claimed"
    TAKEN = "taken"  # another driver is launching this configuration
    BUDGET_SPENT = "budget_spent"  # the sweep's budget is committed (launched or being launched)
    MEASURED = "measured"  # a first launch of a configuration another driver has just measured


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class DriverId:
    """Who this driver is: host, PID and the process's start time (a PID can be reused)."""

    host: str
    pid: int
    started: int

    @classmethod
    def this_process(cls) -> DriverId:
        """The running process."""
        return cls(socket.gethostname(), os.getpid(), int(psutil.Process().create_time()))

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.started}"

    @classmethod
    def parse(cls, text_: str) -> DriverId:
        """The inverse of ``str``."""
        host, pid, started = text_.rsplit(":", 2)
        return cls(host, int(pid), int(started))

    def gone(self) -> bool:
        """True when this driver ran on this host and its process no longer exists."""
        if self.host != socket.gethostname():
            return False
        try:
            return int(psutil.Process(self.pid).create_time()) != self.started
        except psutil.Error:
            return True


class Coordination:
    """This driver's view of the others on one sweep (see module docstring)."""

    def __init__(self, engine: Engine, sweep_id: int, where: str) -> None:
        self.sweep_id, self.where = sweep_id, where
        self.me = DriverId.this_process()
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._postgres = engine.dialect.name == "postgresql"
        self._beaten = datetime.min

    def register(self) -> None:
        """Announce this driver (and forget the dead ones, releasing their claims)."""
        now = _now()
        with self._session() as s:
            s.merge(DriverRecord(id=str(self.me), sweep_id=self.sweep_id, host=self.me.host, pid=self.me.pid,
                                 started_at=now, heartbeat_at=now))
        self._beaten = now
        self.forget_the_dead()

    def beat(self) -> bool:
        """Refresh the heartbeat, at most every ``BEAT_EVERY_S``; True when it did (time to look for
        dead drivers too)."""
        now = _now()
        if (now - self._beaten).total_seconds() < BEAT_EVERY_S:
            return False
        with self._session() as s:
            beaten = cast(CursorResult[Any], s.execute(
                update(DriverRecord).where(DriverRecord.id == str(self.me)).values(heartbeat_at=now))).rowcount
        if not beaten:  # taken for dead while it stalled (its row removed): announce it again
            self.register()
        self._beaten = now
        return True

    def leave(self) -> None:
        """This driver is done: its row and any claim left go."""
        with self._session() as s:
            s.execute(delete(LaunchClaim).where(LaunchClaim.driver == str(self.me)))
            s.execute(delete(DriverRecord).where(DriverRecord.id == str(self.me)))

    def alive(self) -> set[str]:
        """The drivers of this sweep that are alive (this one included)."""
        with self._session() as s:
            return self._live(self._rows(s))

    def forget_the_dead(self) -> set[str]:
        """Remove dead drivers and their claims; returns the live ones. One session, and the claims read
        before the drivers: a driver registers before it claims, so whoever registers meanwhile is either
        unseen (its row and claims untouched) or seen alive, never taken for dead."""
        with self._session() as s:
            claimants = set(s.scalars(select(LaunchClaim.driver).where(LaunchClaim.sweep_id == self.sweep_id)))
            rows = self._rows(s)
            live = self._live(rows)
            dead = {d for d, _beat in rows if d not in live}
            gone = dead | (claimants - live)
            if gone:
                s.execute(delete(LaunchClaim).where(LaunchClaim.sweep_id == self.sweep_id,
                                                    LaunchClaim.driver.in_(gone)))
                s.execute(delete(DriverRecord).where(DriverRecord.id.in_(dead)))
        return live

    def _rows(self, s: Session) -> list[tuple[str, datetime]]:
        rows = s.execute(select(DriverRecord.id, DriverRecord.heartbeat_at)
                         .where(DriverRecord.sweep_id == self.sweep_id)).all()
        return [(d, beat) for d, beat in rows]

    def _live(self, rows: list[tuple[str, datetime]]) -> set[str]:
        cutoff = _now() - timedelta(seconds=STALE_S)
        return {d for d, beat in rows if d == str(self.me) or (beat >= cutoff and not DriverId.parse(d).gone())}

    def claim(self, config_key: str, trial_number: int, *, counted: bool, budget: int, first: bool = True) -> Claim:
        """Claim the launch of a configuration (see module docstring); ``first``: a first measurement
        (refused when one was recorded since the caller looked), not a repeat."""
        params = {"sweep": self.sweep_id, "key": config_key, "trial": trial_number, "driver": str(self.me),
                  "counted": counted, "uncounted": not counted, "budget": budget, "first": first}
        try:
            with self._session() as s:
                if self._postgres:  # claims of one sweep one at a time (SQLite: the INSERT's write lock); NO KEY
                    # UPDATE lets a run's record (a foreign key to the sweep) commit meanwhile: no deadlock
                    s.execute(select(SweepRecord.id).where(SweepRecord.id == self.sweep_id)
                              .with_for_update(key_share=True))
                inserted = cast(CursorResult[Any], s.execute(_CLAIM, params)).rowcount
        except IntegrityError:
            return Claim.TAKEN
        if inserted:
            return Claim.CLAIMED
        return Claim.MEASURED if first and self.measured(config_key) else Claim.BUDGET_SPENT

    def measured(self, config_key: str) -> bool:
        """Has a first measurement of this configuration been recorded?"""
        with self._session() as s:
            return s.scalar(text("SELECT 1 FROM tuner_trial_runs WHERE sweep_id = :sweep AND config_key = :key "
                                 "AND status IN ('ok', 'infeasible') AND repeat_of IS NULL LIMIT 1"),
                            {"sweep": self.sweep_id, "key": config_key}) is not None

    def own_trial(self, trial_id: int, key: str) -> bool:
        """Take a trial of the shared study for this driver by writing its owner attribute ``key``, in one
        INSERT that Optuna's unique (trial, key) constraint lets only one driver make: two drivers that
        popped the same queued trial (a re-measure, a retry) must not both run it. False: another has it."""
        try:
            with self._session() as s:
                s.execute(_OWN, {"trial": trial_id, "key": key, "value": json.dumps(str(self.me))})
        except IntegrityError:
            return False
        return True

    def claimed(self, config_key: str) -> bool:
        """Is some driver launching this configuration now?"""
        with self._session() as s:
            return s.scalar(select(LaunchClaim.id).where(LaunchClaim.sweep_id == self.sweep_id,
                                                         LaunchClaim.config_key == config_key)) is not None

    def committed(self) -> int:
        """Counted claims of every driver (launches under way that the budget already counts)."""
        with self._session() as s:
            rows = s.scalars(select(LaunchClaim.id).where(LaunchClaim.sweep_id == self.sweep_id,
                                                          LaunchClaim.counted.is_(True))).all()
        return len(rows)

    def _session(self) -> _Tx:
        return _Tx(self._sessions, self.where)


class _Tx:
    """A session that commits on success and turns database errors (but a claim's conflict) into StoreError."""

    def __init__(self, sessions: sessionmaker[Session], where: str) -> None:
        self.session, self.where = sessions(), where

    def __enter__(self) -> Session:
        return self.session

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            if kind is None:
                self.session.commit()
            else:
                self.session.rollback()
        except IntegrityError:
            self.session.rollback()
            raise
        except SQLAlchemyError as err:
            self.session.rollback()
            raise StoreError(f"{self.where}: {type(err).__name__}: {str(err).splitlines()[0]}") from err
        finally:
            self.session.close()
        if isinstance(exc, SQLAlchemyError) and not isinstance(exc, IntegrityError):
            raise StoreError(f"{self.where}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from exc
