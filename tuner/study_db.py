"""The Optuna study of a sweep on the sweep database: open it, check a resumed space against it."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.samplers import BaseSampler
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, OperationalError

from core.errors import ConfigError, StudyError
from db.location import BUSY_TIMEOUT_S, Database, commit_without_fsync, database, url_for
from tuner.space import SearchSpace

METRIC_NAMES = ["tok/s@C16"]
TABLE_RACE_ATTEMPTS = 5  # drivers started together create Optuna's tables at the same moment


def rdb_storage(where: str | Path | Database, *, read_only: bool = False) -> optuna.storages.RDBStorage:
    """Optuna's storage on the sweep database (SQLite: 30 s busy timeout); ``read_only`` neither creates
    nor upgrades Optuna's tables, and opens a SQLite file read-only (for readers: report, dashboard)."""
    db = database(where)
    url = url_for(db, read_only=read_only)
    engine_kwargs: dict[str, Any] = ({"connect_args": {"timeout": BUSY_TIMEOUT_S}} if db.is_sqlite
                                     else {"pool_pre_ping": True})
    for attempt in range(1, TABLE_RACE_ATTEMPTS + 1):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs,
                                                 skip_compatibility_check=read_only, skip_table_creation=read_only)
        except (IntegrityError, OperationalError):
            if attempt == TABLE_RACE_ATTEMPTS or read_only:  # else another driver is creating them: again
                raise
            time.sleep(0.2 * attempt)
            continue
        if db.is_sqlite and not read_only:  # about 30 commits a trial: none waits for an fsync
            event.listen(storage.engine, "connect", commit_without_fsync)
            storage.engine.dispose()  # the connection that created the tables had no such hook
        return storage
    raise AssertionError("unreachable")


def open_study(db_path: str | Path | Database, name: str, sampler: BaseSampler | None = None,
               create: bool = True) -> optuna.Study:
    """The Optuna study of a sweep on the sweep database; without ``create``, a reader's view of an
    existing one (StudyError if missing)."""
    storage = rdb_storage(db_path, read_only=not create)
    if not create:
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError as exc:
            raise StudyError(f"{db_path}: no study named {name!r}") from exc
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize", sampler=sampler,
                                load_if_exists=True)
    if study.metric_names != METRIC_NAMES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.set_metric_names(METRIC_NAMES)
    return study


def check_resumable(study: optuna.Study, space: SearchSpace, db_path: str | Path) -> None:
    """ConfigError when a parameter of ``space`` is sampled differently from how the study's earlier
    trials sampled it (Optuna cannot continue a study whose choices changed)."""
    recorded: dict[str, optuna.distributions.BaseDistribution] = {}
    for trial in study.get_trials(deepcopy=False):
        for name, dist in trial.distributions.items():
            recorded.setdefault(name, dist)
    for param in space.params:
        old, new = recorded.get(param.name), param.distribution()
        if old is None:
            continue
        try:
            optuna.distributions.check_distribution_compatibility(old, new)
        except ValueError:
            raise ConfigError(
                f"{param.path}: now {_described(new)}, but study {study.study_name!r} in {db_path} sampled it "
                f"from {_described(old)}; give the changed space its own --study name (or put the old values "
                "back)") from None


def _described(dist: optuna.distributions.BaseDistribution) -> str:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return f"choices [{', '.join(map(str, dist.choices))}]"
    if isinstance(dist, optuna.distributions.IntDistribution | optuna.distributions.FloatDistribution):
        return f"range {dist.low}..{dist.high}" + (" (log)" if dist.log else "")
    return repr(dist)


def distinct_configurations(space: SearchSpace, limit: int = 50_000, enough: int | None = None) -> float:
    """How many different servers the space (and its baseline) can launch; ``inf`` when too many to
    list. With ``enough``, counting stops once there are more than that many (the count then is only
    a lower bound: a sweep of ``enough`` launches cannot exhaust the space)."""
    if space.cardinality() > limit:  # inf too
        return math.inf
    keys = {space.baseline().key()}
    for params in space.iter_configs():
        keys.add(space.from_params(params).key())
        if enough is not None and len(keys) > enough:
            break
    return len(keys)
