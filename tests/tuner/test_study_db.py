"""The sweep database's writers commit without waiting for an fsync, and lose nothing when killed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

from db.store import Store
from tuner.study_db import open_study, rdb_storage

SYNCHRONOUS_NORMAL = 1  # PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL

WRITE_THEN_DIE = """
import os, sys
from tuner.study_db import open_study
from db.store import Store
Store(sys.argv[1])  # the file in WAL mode, as a sweep opens it
study = open_study(sys.argv[1], "s")
trial = study.ask()
trial.set_user_attr("tok_s_c16", 29.0)
study.tell(trial, 29.0)
os._exit(9)  # no clean shutdown: no checkpoint, no close
"""


def test_writers_commit_without_fsync_and_readers_stay_read_only(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = Store(db)
    writer = rdb_storage(db)
    reader = rdb_storage(db, read_only=True)
    for engine in (store.engine, writer.engine):
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA synchronous")).scalar() == SYNCHRONOUS_NORMAL
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    with reader.engine.connect() as conn:
        assert conn.execute(text("PRAGMA query_only")).scalar() == 0  # mode=ro in the URL, no pragma of ours
        assert "mode=ro" in str(reader.engine.url)


def test_a_killed_writer_loses_no_commit(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    done = subprocess.run([sys.executable, "-c", WRITE_THEN_DIE, str(db)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 9, done.stderr
    (trial,) = open_study(db, "s", create=False).get_trials()
    assert trial.value == 29.0
    assert trial.user_attrs == {"tok_s_c16": 29.0}
