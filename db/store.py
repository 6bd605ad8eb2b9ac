"""The store: a handful of methods over the tuner's tables; SQLAlchemy errors become StoreError.

The database is one SQLite file in WAL mode with a 30 s busy timeout, shared with Optuna's
RDBStorage and readable by optuna-dashboard while a sweep runs. Only the driver writes.
Secrets never reach it: env values of ``*TOKEN*``/``*KEY*``/``*SECRET*`` variables and of secret
options (``--api-key`` ...) are redacted, in argv, env and the server log.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Column, create_engine, delete, event, func, inspect, or_, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, defer, sessionmaker

from core.errors import StoreError
from core.redact import redact_argv, redact_env, redact_flags, scrub, secret_values
from core.types import Config, RunStatus, TrialResult
from db.location import BUSY_TIMEOUT_S, Database, check, commit_without_fsync, database, url_for
from db.models import Base, LaunchClaim, LearnedRule, SweepRecord, TrialRun

MAX_LOG_CHARS = 1_000_000


def enable_wal(path: str | Path) -> None:
    """Switch the file to WAL mode (persistent property of the file; creates it if missing)."""
    try:
        Path(path).resolve().parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S) as conn:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"{path}: cannot open the database: {exc}") from exc


def engine_for(db: Database, *, read_only: bool = False) -> Engine:
    """A SQLAlchemy engine on the database: SQLite with the busy timeout (read-only: it cannot write,
    and opens a file on a read-only filesystem as it is); a server database as its URL says."""
    if not db.is_sqlite:
        return create_engine(db.url, pool_pre_ping=True)
    return create_engine(url_for(db, read_only=read_only), connect_args={"timeout": BUSY_TIMEOUT_S})


@dataclass(frozen=True)
class SweepRow:
    """A sweep as read back."""

    id: int
    study_name: str
    space_path: str
    space_text: str
    engine: str
    sglang_version: str
    gpu_name: str
    gpu_arch: str | None
    gpu_count: int
    driver: str
    hosts: list[str]
    budget: int
    roofline_tok_s: float | None
    time_scale: float
    created_at: datetime
    objective: str | None = None  # a core.types.Objective value; None (older sweeps): per_server


@dataclass(frozen=True)
class RunRow:
    """A trial run as read back."""

    id: int
    trial_number: int
    config_key: str
    baseline: bool
    params: dict[str, Any]
    flags: dict[str, Any]
    argv: list[str]
    env: dict[str, str]
    status: RunStatus
    failure_kind: str | None
    failure_reason: str
    log_tail: str
    tok_s: float | None
    metrics: dict[str, Any] | None
    gate: dict[str, Any] | None
    startup_s: float | None
    sglang_version: str
    node: str
    gpu_ids: list[str]
    started_at: datetime | None
    finished_at: datetime | None
    cached_from: int | None
    repeat_of: int | None = None
    remeasure: bool | None = None
    profile: dict[str, Any] | None = None  # where the GPU time went (--profile-best), or {"error": why}
    curve: list[dict[str, Any]] | None = None  # BenchResult.as_dict() at further concurrencies (--front-at)
    ran_as: dict[str, Any] | None = None  # settings the server ran otherwise than asked (its /server_info)


def _row(obj: Any, cls: type[Any]) -> Any:
    """The frozen row of an ORM object; a column an older database lacks (deferred, never loaded) reads None."""
    unloaded = inspect(obj).unloaded
    row = cls(**{f: None if f in unloaded else getattr(obj, f) for f in cls.__dataclass_fields__})
    if cls is RunRow:
        object.__setattr__(row, "status", RunStatus(row.status))
    return row


LAUNCHED = (RunStatus.OK.value, RunStatus.INFEASIBLE.value)


class Store:
    """Sweeps and trial runs in one SQLite file (see module docstring)."""

    def __init__(self, where: str | Path | Database, *, read_only: bool = False) -> None:
        self.db = database(where)
        self.read_only = read_only
        check(self.db, writing=not read_only)
        if self.db.path is not None and not read_only:
            enable_wal(self.db.path)
        try:
            self.engine: Engine = engine_for(self.db, read_only=read_only)
        except (SQLAlchemyError, ImportError) as exc:
            raise StoreError(f"{self.db}: cannot open the database: {str(exc).splitlines()[0]}") from exc
        if self.db.is_sqlite and not read_only:
            event.listen(self.engine, "connect", commit_without_fsync)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._older: dict[type[Any], list[Any]] = {}  # per model: defer() of the columns the file lacks
        if not read_only:
            self._create_tables()
            self._add_missing_columns()
        else:
            self._older = self._columns_missing()

    def _create_tables(self, attempts: int = 5) -> None:
        """Create the tuner's tables if missing (drivers started together race to: try again)."""
        for attempt in range(1, attempts + 1):
            try:
                with self._session() as s:
                    Base.metadata.create_all(s.get_bind())
                return
            except StoreError:
                if attempt == attempts:
                    raise
                time.sleep(0.2 * attempt)

    def _missing_columns(self) -> dict[str, list[Column[Any]]]:
        """Per table that exists: the columns of this version a database an older one wrote lacks."""
        inspector = inspect(self.engine)
        out: dict[str, list[Column[Any]]] = {}
        for table in Base.metadata.sorted_tables:
            if inspector.has_table(table.name):
                have = {c["name"] for c in inspector.get_columns(table.name)}
                out[table.name] = [c for c in table.columns if c.name not in have]
        return out

    def _add_missing_columns(self) -> None:
        """Upgrade a database written by an older version: add the nullable columns it lacks."""
        try:
            missing = self._missing_columns()
            with self.engine.begin() as conn:
                for table, columns in missing.items():
                    for column in columns:
                        if column.nullable:
                            kind = column.type.compile(dialect=self.engine.dialect)
                            conn.execute(text(f'ALTER TABLE "{table}" ADD COLUMN "{column.name}" {kind}'))
        except SQLAlchemyError as exc:
            raise StoreError(f"{self.db}: cannot upgrade the database: {str(exc).splitlines()[0]}") from exc

    def _columns_missing(self) -> dict[type[Any], list[Any]]:
        """Read-only on a file an older version wrote: per model, ``defer`` of the columns it lacks."""
        try:
            missing = self._missing_columns()
        except SQLAlchemyError:
            return {}
        return {model: [defer(getattr(model, c.name)) for c in missing.get(model.__tablename__, [])]
                for model in (TrialRun, SweepRecord)}

    def _select(self, model: type[Any]) -> Any:
        """``select(model)`` without the columns this (older) database lacks."""
        return select(model).options(*self._older.get(model, []))

    @contextmanager
    def _session(self) -> Iterator[Session]:
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise StoreError(f"{self.db}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from exc
        finally:
            session.close()

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    # ---- sweeps --------------------------------------------------------------------------------
    def ensure_sweep(self, study_name: str, **fields: Any) -> SweepRow:
        """The sweep named ``study_name``, created with ``fields`` if new (else fields are updated)."""
        try:
            return self._ensure_sweep(study_name, fields)
        except StoreError:  # another driver created it at the same moment: update it
            return self._ensure_sweep(study_name, fields)

    def _ensure_sweep(self, study_name: str, fields: dict[str, Any]) -> SweepRow:
        now = datetime.now(UTC).replace(tzinfo=None)
        with self._session() as s:
            sweep = s.scalar(self._select(SweepRecord).where(SweepRecord.study_name == study_name))
            if sweep is None:
                sweep = SweepRecord(study_name=study_name, created_at=now, updated_at=now, **fields)
                s.add(sweep)
            else:
                for key, value in fields.items():
                    setattr(sweep, key, value)
                sweep.updated_at = now
            s.flush()
            return _row(sweep, SweepRow)  # type: ignore[no-any-return]

    def _no_tables_yet(self) -> bool:
        """Read-only, on a database whose writer has not created the tables yet (a sweep just starting)."""
        if not self.read_only:
            return False
        try:
            return not inspect(self.engine).has_table(SweepRecord.__tablename__)
        except SQLAlchemyError:
            return False

    def sweep(self, study_name: str) -> SweepRow | None:
        """The sweep of a study, or None (also while a starting sweep has not created the tables)."""
        if self._no_tables_yet():
            return None
        with self._session() as s:
            sweep = s.scalar(self._select(SweepRecord).where(SweepRecord.study_name == study_name))
            return _row(sweep, SweepRow) if sweep else None

    def sweeps(self) -> list[SweepRow]:
        """Every sweep, newest first ([] while a starting sweep has not created the tables)."""
        if self._no_tables_yet():
            return []
        with self._session() as s:
            newest_first = self._select(SweepRecord).order_by(SweepRecord.updated_at.desc())
            return [_row(x, SweepRow) for x in s.scalars(newest_first)]

    # ---- runs ----------------------------------------------------------------------------------
    def record(self, sweep_id: int, result: TrialResult, config: Config, *, status: RunStatus,
               baseline: bool = False, cached_from: int | None = None, repeat_of: int | None = None,
               remeasure: bool = False) -> RunRow:
        """Write one trial run (secrets redacted); a second record of the same trial number replaces it.

        ``cached_from``: answered from that trial's run, no launch. ``repeat_of``: a second measurement
        of that trial's configuration (``remeasure``: of a surprising reading, counted in the budget; else
        a confirmation, not counted).
        measurement of that trial's configuration.
        """
        secrets = secret_values(result.argv, {**config.env, **result.env}, config.flags)
        bench = result.bench
        with self._session() as s:
            if not self.db.is_sqlite:  # after the claims of this sweep under way, before the next (db.coordination)
                s.execute(select(SweepRecord.id).where(SweepRecord.id == sweep_id).with_for_update(key_share=True))
            old = s.scalar(self._select(TrialRun).where(TrialRun.sweep_id == sweep_id,
                                                  TrialRun.trial_number == result.trial_number))
            if old is not None:
                s.delete(old)
                s.flush()
            s.execute(delete(LaunchClaim).where(LaunchClaim.sweep_id == sweep_id,  # its launch is over
                                                LaunchClaim.trial_number == result.trial_number))
            run = TrialRun(
                sweep_id=sweep_id, trial_number=result.trial_number, config_key=result.config_key,
                baseline=baseline, params=dict(config.params), flags=redact_flags(dict(config.flags)),
                argv=redact_argv(result.argv), env=redact_env(dict(result.env)), status=RunStatus(status).value,
                failure_kind=result.failure_kind.value if result.failure_kind else None,
                failure_reason=scrub(result.failure_reason, secrets), log_tail=scrub(result.log_tail, secrets),
                server_log=scrub(result.server_log[-MAX_LOG_CHARS:], secrets),
                tok_s=bench.tok_s if bench and result.failure_kind is None else None,
                metrics=bench.as_dict() if bench else None,
                gate=asdict(result.gate) if result.gate else None, startup_s=result.startup_s,
                sglang_version=result.sglang_version, node=result.node, gpu_ids=list(result.gpu_ids),
                started_at=_ts(result.started_at), finished_at=_ts(result.finished_at), cached_from=cached_from,
                repeat_of=repeat_of, remeasure=remeasure or None,
                profile=result.profile.as_dict() if result.profile else
                ({"error": result.profile_error} if result.profile_error else None),
                curve=[b.as_dict() for b in result.curve] or None, ran_as=dict(result.ran_as) or None,
            )
            s.add(run)
            s.flush()
            return _row(run, RunRow)  # type: ignore[no-any-return]

    def record_cached_metrics(self, sweep_id: int, trial_number: int, prior: RunRow) -> RunRow:
        """Copy the verdict of ``prior`` (tok/s, metrics, gate, startup) onto a run answered from the store."""
        with self._session() as s:
            run = s.scalar(self._select(TrialRun).where(TrialRun.sweep_id == sweep_id,
                                                  TrialRun.trial_number == trial_number))
            if run is None:
                raise StoreError(f"{self.db}: no run for trial {trial_number}")
            run.tok_s, run.metrics, run.gate, run.startup_s = prior.tok_s, prior.metrics, prior.gate, prior.startup_s
            run.log_tail = prior.log_tail
            s.flush()
            return _row(run, RunRow)  # type: ignore[no-any-return]

    def runs(self, sweep_id: int) -> list[RunRow]:
        """Every run of a sweep, by trial number."""
        with self._session() as s:
            q = self._select(TrialRun).where(TrialRun.sweep_id == sweep_id).order_by(TrialRun.trial_number)
            return [_row(r, RunRow) for r in s.scalars(q)]

    def run(self, sweep_id: int, trial_number: int) -> RunRow | None:
        """One run by trial number."""
        with self._session() as s:
            r = s.scalar(self._select(TrialRun).where(TrialRun.sweep_id == sweep_id,
                                                TrialRun.trial_number == trial_number))
            return _row(r, RunRow) if r else None

    def measured(self, sweep_id: int, config_key: str) -> RunRow | None:
        """The first launched (not cached, not interrupted) run of a configuration, if any."""
        with self._session() as s:
            r = s.scalar(self._select(TrialRun).where(
                TrialRun.sweep_id == sweep_id, TrialRun.config_key == config_key, TrialRun.repeat_of.is_(None),
                TrialRun.status.in_(LAUNCHED)).order_by(TrialRun.trial_number))
            return _row(r, RunRow) if r else None

    def best_tok_s(self, sweep_id: int) -> float | None:
        """The highest tok/s@C16 measured so far in a sweep (None before the first)."""
        with self._session() as s:
            q = select(func.max(TrialRun.tok_s)).where(TrialRun.sweep_id == sweep_id,
                                                   TrialRun.status == RunStatus.OK.value)
            value = s.scalar(q)
            return float(value) if value is not None else None

    def count_launched(self, sweep_id: int) -> int:
        """Launches with a verdict (ok or infeasible) of distinct configurations, plus re-measurements of
        surprises: what the budget counts (confirmations are not counted)."""
        with self._session() as s:
            q = select(func.count()).select_from(TrialRun).where(
                TrialRun.sweep_id == sweep_id, TrialRun.status.in_(LAUNCHED),
                or_(TrialRun.repeat_of.is_(None), TrialRun.remeasure.is_(True)))
            return int(s.scalar(q) or 0)

    # ---- learned failure rules ----------------------------------------------------------------
    def replace_rules(self, sweep_id: int, rules: list[tuple[str, dict[str, Any]]]) -> None:
        """Store the sweep's learned rules as (text, JSON form), replacing the previous set."""
        with self._session() as s:
            for old in s.scalars(select(LearnedRule).where(LearnedRule.sweep_id == sweep_id)):
                s.delete(old)
            s.add_all(LearnedRule(sweep_id=sweep_id, position=i, text=text, rule=rule)
                      for i, (text, rule) in enumerate(rules))

    def rules(self, sweep_id: int) -> list[tuple[str, dict[str, Any]]]:
        """The sweep's learned rules as (text, JSON form), in the order they were learned."""
        with self._session() as s:
            q = select(LearnedRule).where(LearnedRule.sweep_id == sweep_id).order_by(LearnedRule.position)
            return [(r.text, r.rule) for r in s.scalars(q)]

    def server_log(self, sweep_id: int, trial_number: int) -> str:
        """The full (redacted) server log of one run."""
        with self._session() as s:
            r = s.scalar(self._select(TrialRun).where(TrialRun.sweep_id == sweep_id,
                                                TrialRun.trial_number == trial_number))
            return r.server_log if r else ""

    def server_logs(self, sweep_id: int) -> dict[int, str]:
        """Every launched run's server log, by trial number (one query)."""
        with self._session() as s:
            q = select(TrialRun.trial_number, TrialRun.server_log).where(TrialRun.sweep_id == sweep_id,
                                                                        TrialRun.server_log != "")
            return {n: log for n, log in s.execute(q)}


def _ts(value: float) -> datetime | None:
    return datetime.fromtimestamp(value, UTC).replace(tzinfo=None) if value else None
