"""Where a sweep's records live, and whether that place holds a database the tuner can use.

``--db`` is a SQLite file (the default, ``tuner.db``) or a SQLAlchemy URL (``sqlite:///...``,
``postgresql://...``) that several drivers on several machines can share. Before anything starts
(Ray, servers), ``check`` says in one line what is wrong with it: not a database, damaged, another
program's, missing (for readers), or not writable (for a sweep). Readers open a SQLite file
read-only and never create or change a table, so a database on a read-only filesystem or one being
written by a running sweep can always be shown, exported and reported.
"""

from __future__ import annotations

import os
import re
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from core.errors import NotADatabaseError, StoreError

OUR_TABLES = frozenset({"tuner_sweeps", "studies"})  # ours, or an Optuna storage we may add to
BUSY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Database:
    """A sweep database: ``url`` for SQLAlchemy/Optuna; ``path`` is the SQLite file (None for a server)."""

    url: str
    path: Path | None

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else _masked(self.url)

    @property
    def is_sqlite(self) -> bool:
        """True for a SQLite file."""
        return self.path is not None

    def beside(self, suffix: str) -> Path:
        """A folder that goes with the database (``tuner-artifacts`` beside ``tuner.db``); for a server
        database, in the working directory."""
        if self.path is None:
            return Path.cwd() / f"tuner{suffix}"
        return self.path.with_name(self.path.stem + suffix)

    def reader_url(self, immutable: bool = False) -> str:
        """A URL that cannot write: SQLite opened ``mode=ro`` (``immutable`` on a read-only filesystem,
        where not even the WAL index can be created); a server database as it is."""
        if self.path is None:
            return self.url
        flags = "immutable=1" if immutable else "mode=ro"
        return f"sqlite:///file:{quote(str(self.path))}?{flags}&uri=true"


def database(where: str | Path | Database) -> Database:
    """``--db``'s value as a Database: a URL when it has a scheme (``postgresql://``), else a file."""
    if isinstance(where, Database):
        return where
    text = str(where)
    if re.match(r"^[a-z][a-z0-9+]*://", text):
        if text.startswith("sqlite:///") and len(text) > len("sqlite:///"):
            return database(Path(text[len("sqlite:///"):]))
        if text.startswith(("postgresql://", "postgres://")):  # the driver we install (psycopg 3)
            text = "postgresql+psycopg://" + text.split("://", 1)[1]
        return Database(text, None)
    path = Path(text).expanduser().resolve()
    return Database(f"sqlite:///{path}", path)


def check(db: Database, *, writing: bool) -> None:
    """StoreError, naming the database, when it cannot serve a sweep (``writing``) or a reader."""
    if db.path is None:
        return  # a server database is checked by connecting to it
    path = db.path
    if not path.exists():
        if writing:
            _check_creatable(path)
            return
        raise NotADatabaseError(f"{path}: no such database (run `tuner sweep` first or pass --db)")
    if path.is_dir():
        raise NotADatabaseError(f"{path}: is a directory, not a database file")
    tables = _tables(db, writing)
    foreign = sorted(tables - {t for t in tables if t.startswith(("tuner_", "sqlite_"))})
    if tables and not tables & OUR_TABLES:
        raise NotADatabaseError(f"{path}: another program's SQLite database (tables: {', '.join(foreign[:5])}); "
                         "give the sweep a database of its own with --db")
    if writing:
        _check_writable(path)


def commit_without_fsync(dbapi_conn: Any, _record: Any) -> None:
    """SQLAlchemy ``connect`` hook for a writer of a WAL-mode SQLite file: ``synchronous=NORMAL``. A
    commit then waits for no fsync (the WAL is synced at checkpoints); a crash of the process loses
    nothing, a power loss at most the last commits, and the file stays consistent either way."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def url_for(db: Database, *, read_only: bool) -> str:
    """The URL to open ``db`` with: a reader's SQLite file read-only (``immutable`` where the
    filesystem is read-only and its WAL index cannot be made), else ``db.url``."""
    if not read_only or not db.is_sqlite:
        return db.url
    return db.reader_url(immutable=not sqlite_readable(db))


def sqlite_readable(db: Database) -> bool:
    """True when a read-only connection can open the SQLite file as it is (False on a read-only
    filesystem where its WAL index does not exist yet: open it ``immutable`` then)."""
    if db.path is None:
        return True
    try:
        conn = sqlite3.connect(f"file:{db.path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return True


def _tables(db: Database, writing: bool) -> set[str]:
    """The tables of the SQLite file (a damaged or truncated file fails already here). Only SQLite
    touches the file: closing a descriptor of our own would drop the locks of this process's other
    connections to it (SQLite's documented way to corrupt a database). A writer opens it
    as a writer would (recovering a WAL a killed sweep left); a reader read-only, or ``immutable`` where
    the filesystem is read-only."""
    modes = ("mode=rw",) if writing else ("mode=ro", "immutable=1")
    for mode in modes:
        try:
            conn = sqlite3.connect(f"file:{quote(str(db.path))}?{mode}", uri=True, timeout=BUSY_TIMEOUT_S)
            try:
                return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            if "file is not a database" in str(exc):
                raise NotADatabaseError(f"{db.path}: not a SQLite database (a sweep database is the file "
                                        "`tuner sweep --db` wrote)") from exc
            if mode == "mode=ro" and "unable to open" in str(exc):
                continue  # a read-only filesystem: no WAL index can be made; read it as it is
            if writing and "unable to open" in str(exc):
                break  # not writable here: said by _check_writable
            raise NotADatabaseError(f"{db.path}: the database is damaged or unreadable ({exc}); keep a copy, "
                                    "and start a new one with another --db") from exc
    return set() if not writing else _tables(db, writing=False)


def _check_writable(path: Path) -> None:
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.rollback()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: a sweep cannot write to the database ({exc}); show, export and report can "
                         "still read it") from exc


def _check_creatable(path: Path) -> None:
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise StoreError(f"{path}: cannot create the database: {parent} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".tuner-probe-", dir=parent)  # unique: drivers start together
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the database here: {exc.strerror or exc}") from exc


def _masked(url: str) -> str:
    """The URL without its password."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)
