"""Whatever file ``--db`` names, every command answers in one line, writes nothing into what is not
ours, and a database on a read-only filesystem can still be shown, exported and reported."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

CLI = [sys.executable, "-m", "tuner.cli"]
READERS = (["show"], ["export", "-o", "{tmp}/launch.sh"], ["report", "-o", "{tmp}/report.html"])
SWEEP = ["sweep", "--offline", "--space", str(FIXTURES / "e2e-space.yaml"), "--budget", "3"]


def _tuner(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [a.replace("{tmp}", str(tmp)) for a in args]
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, cwd=tmp, timeout=120,
                          env={**os.environ, "COLUMNS": "200", "HOME": str(tmp)})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with a finished offline sweep in it."""
    tmp = tmp_path_factory.mktemp("recorded")
    proc = _tuner(tmp, *SWEEP, "--db", str(tmp / "good.db"))
    assert proc.returncode == 0, proc.stderr
    return tmp / "good.db"


def _another_programs(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER, total REAL)")


def _make(kind: str, path: Path, recorded: Path) -> None:
    if kind == "random bytes":
        path.write_bytes(os.urandom(4096))
    elif kind == "text":
        path.write_text("name: not a database\n")
    elif kind == "another program's SQLite":
        _another_programs(path)
    elif kind.startswith("truncated"):
        data = recorded.read_bytes()
        path.write_bytes(data[: int(kind.split()[1])])
    elif kind == "a directory":
        path.mkdir()


@pytest.mark.parametrize("kind", ["random bytes", "text", "another program's SQLite", "truncated 3000",
                                  "truncated 20000", "a directory"])
def test_a_file_that_is_no_sweep_database_is_one_line_and_exit_2(tmp_path: Path, recorded: Path, kind: str) -> None:
    db = tmp_path / "x.db"
    _make(kind, db, recorded)
    before = db.read_bytes() if db.is_file() else None
    for args in [*READERS, ["dashboard", "--port", "1"], SWEEP]:
        proc = _tuner(tmp_path, *args, "--db", str(db))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {db}: "), (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    if before is not None:
        assert db.read_bytes() == before, "nothing was written into a file that is not ours"


def test_readers_never_write_and_a_missing_database_is_named(tmp_path: Path, recorded: Path) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(recorded, copy)
    before = copy.read_bytes()
    for args in READERS:
        proc = _tuner(tmp_path, *args, "--db", str(copy))
        assert proc.returncode == 0, proc.stderr
    assert copy.read_bytes() == before
    missing = _tuner(tmp_path, "show", "--db", str(tmp_path / "nope.db"))
    assert missing.returncode == 2 and "nope.db: no such database" in missing.stderr
    assert not (tmp_path / "nope.db").exists()


def test_an_empty_file_is_a_new_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    proc = _tuner(tmp_path, *SWEEP, "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert _tuner(tmp_path, "show", "--db", str(db)).returncode == 0


@pytest.fixture
def read_only_copy(tmp_path: Path, recorded: Path) -> Iterator[Path]:
    """The recorded database and its artifacts on a filesystem mounted read-only (needs mount rights)."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a filesystem here (not root)")
    try:
        shutil.copy(recorded, mnt / "good.db")
        shutil.copytree(recorded.with_name("good-artifacts"), mnt / "good-artifacts")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield mnt / "good.db"
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_database_on_a_read_only_filesystem_is_read_but_not_swept(tmp_path: Path, read_only_copy: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for args in READERS:
        proc = _tuner(out, *args, "--db", str(read_only_copy))
        assert proc.returncode == 0, (args, proc.stderr)
    assert "best: trial" in _tuner(out, "show", "--db", str(read_only_copy)).stdout
    proc = _tuner(out, *SWEEP, "--db", str(read_only_copy))
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"error: {read_only_copy}: a sweep cannot write to the database (unable to open database file); show, "
        "export and report can still read it"]
