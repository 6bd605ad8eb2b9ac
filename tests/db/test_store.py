"""The SQLite store: records, reads back, redacts secrets, counts what the budget counts."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from core.errors import StoreError
from core.types import Config, FailureKind, TrialResult
from db.store import Store
from tests.conftest import bench_result


def _result(n: int, key: str, *, tok_s: float | None = None, kind: FailureKind | None = None,
            env: dict[str, str] | None = None, argv: tuple[str, ...] = ("python3", "-m", "sglang.launch_server"),
            log: str = "") -> TrialResult:
    return TrialResult(trial_number=n, config_key=key, argv=argv, env=env or {}, sglang_version="0.5.23",
                       node="host", gpu_ids=("0", "1"), started_at=time.time(), finished_at=time.time(),
                       bench=bench_result(tok_s) if tok_s is not None else None, failure_kind=kind,
                       failure_reason="boom" if kind else "", server_log=log)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "t.db")


def _sweep(store: Store) -> int:
    return store.ensure_sweep("s", space_path="x.yaml", space_text="name: s", engine="sim",
                              sglang_version="0.5.23", gpu_name="g", gpu_arch="sm_120", gpu_count=4, driver="d",
                              hosts=["h"], budget=5, roofline_tok_s=None, time_scale=1.0).id


def test_record_and_read_back(store: Store, tmp_path: Path) -> None:
    sid = _sweep(store)
    cfg = Config(params={"a": 1}, flags={"tp_size": 2})
    store.record(sid, _result(0, "k0", tok_s=10.0), cfg, status="ok", baseline=True)
    store.record(sid, _result(1, "k1", kind=FailureKind.OOM), cfg, status="infeasible")
    store.record(sid, _result(2, "k2", kind=FailureKind.INFRASTRUCTURE), cfg, status="failed")
    runs = store.runs(sid)
    assert [r.status for r in runs] == ["ok", "infeasible", "failed"]
    assert runs[0].tok_s == 10.0 and runs[0].metrics and runs[0].metrics["output_chunks"] == 50
    assert runs[1].failure_kind == "oom" and runs[1].tok_s is None
    assert store.count_launched(sid) == 2
    assert store.measured(sid, "k1") is not None and store.measured(sid, "k2") is None
    with sqlite3.connect(tmp_path / "t.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_same_trial_number_is_replaced_not_duplicated(store: Store) -> None:
    sid = _sweep(store)
    cfg = Config(params={}, flags={})
    store.record(sid, _result(3, "k", kind=FailureKind.INTERRUPTED), cfg, status="interrupted")
    store.record(sid, _result(3, "k", tok_s=5.0), cfg, status="ok")
    assert [(r.trial_number, r.status) for r in store.runs(sid)] == [(3, "ok")]


def test_secrets_never_reach_the_database(store: Store, tmp_path: Path) -> None:
    sid = _sweep(store)
    argv = ("python3", "-m", "sglang.launch_server", "--api-key", "sk-verysecret", "--model-path", "/m")
    env = {"HF_TOKEN": "hf_abcdef123", "NCCL_PROTO": "LL"}
    log = "server_args=ServerArgs(api_key='sk-verysecret') token hf_abcdef123"
    cfg = Config({}, {"api_key": "sk-verysecret", "model_path": "/m"}, env)
    store.record(sid, _result(0, "k", tok_s=1.0, env=env, argv=argv, log=log), cfg, status="ok")
    run = store.runs(sid)[0]
    assert run.env == {"HF_TOKEN": "<redacted>", "NCCL_PROTO": "LL"}
    assert "sk-verysecret" not in run.argv and "<redacted>" in run.argv
    assert run.flags == {"api_key": "<redacted>", "model_path": "/m"}
    raw = (tmp_path / "t.db").read_bytes() + Path(str(tmp_path / "t.db") + "-wal").read_bytes()
    assert b"sk-verysecret" not in raw and b"hf_abcdef123" not in raw


def test_unwritable_database_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="dir.db"):
        Store(tmp_path / "dir.db")


def _older_database(path: Path, without: str) -> int:
    """A database with one measured run, as a version written before the run column ``without`` existed;
    returns its sweep id."""
    store = Store(path)
    sid = _sweep(store)
    store.record(sid, _result(0, "k", tok_s=12.0), Config({}, {}), status="ok")
    store.close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"ALTER TABLE tuner_trial_runs DROP COLUMN {without}")
    return sid


def test_a_database_from_an_older_version_is_upgraded_keeping_its_runs(tmp_path: Path) -> None:
    sid = _older_database(tmp_path / "old.db", without="repeat_of")
    upgraded = Store(tmp_path / "old.db")
    runs = upgraded.runs(sid)
    assert [(r.trial_number, r.tok_s, r.repeat_of) for r in runs] == [(0, 12.0, None)]
    upgraded.record(sid, _result(1, "k", tok_s=13.0), Config({}, {}), status="ok", repeat_of=0)
    assert upgraded.count_launched(sid) == 1


def test_an_older_database_is_read_without_upgrading_it(tmp_path: Path) -> None:
    sid = _older_database(tmp_path / "old.db", without="profile")
    reader = Store(tmp_path / "old.db", read_only=True)  # show, export, report: they never write
    assert [(r.trial_number, r.tok_s, r.profile) for r in reader.runs(sid)] == [(0, 12.0, None)]
    assert reader.run(sid, 0) is not None and reader.sweep("s") is not None
    reader.close()
    with sqlite3.connect(tmp_path / "old.db") as conn:
        assert "profile" not in {row[1] for row in conn.execute("PRAGMA table_info(tuner_trial_runs)")}


def test_a_database_whose_tables_are_not_there_yet_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "starting.db"
    sqlite3.connect(path).close()  # the file a starting sweep has created, before its tables
    reader = Store(path, read_only=True)
    assert reader.sweeps() == [] and reader.sweep("s") is None
    writer = Store(path)
    _sweep(writer)
    assert [s.study_name for s in reader.sweeps()] == ["s"]  # the same reader sees them once they exist
    writer.close()
    reader.close()
