"""Shared fixtures: paths to the bundled spaces and scenarios, and an isolated HOME for Ray."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from core.types import BenchResult

ROOT = Path(__file__).resolve().parent.parent
SPACES = ROOT / "search_spaces"
SCENARIOS = SPACES / "scenarios"
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def write_yaml(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a YAML text into tmp_path and return its path."""
    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


def start_sim(scenario: Path | str, flags: dict[str, object], log_dir: Path, env: dict[str, str] | None = None,
              wait: bool = True, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    """Launch the simulated engine like the tuner does (render + ServerProcess); optionally wait ready."""
    import sys

    from core.flags import FlagTable
    from core.render import render
    from core.types import Config, EngineSpec
    from workers.server import ServerProcess, free_port

    port = free_port()
    engine = EngineSpec(kind="sim", python=sys.executable, scenario=str(scenario))
    cmd = render(Config(params={}, flags=dict(flags), env=dict(env or {})), FlagTable.bundled(), engine,
                 host="127.0.0.1", port=port)
    api_key = str(flags["api_key"]) if flags.get("api_key") else None
    server = ServerProcess(cmd, log_dir / f"sim-{port}.log", url=f"http://127.0.0.1:{port}", api_key=api_key)
    server.start()
    if wait:
        server.wait_ready(timeout_s)
    return server


@contextmanager
def steady_sim(tok_s_c16: float, ttft_ms: float, time_scale: float) -> Iterator[Any]:
    """A ready simulated server (model /m) of a noise-free one-configuration scenario, in a temporary
    directory; stopped on exit. For the measurements in benchmarks/."""
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "steady.yaml"
        scenario.write_text(f"name: steady\ntime_scale: {time_scale}\nbase: {{tok_s_c16: {tok_s_c16}, "
                            f"ttft_ms: {ttft_ms}, startup_s: 10}}\nnoise: {{cv: 0}}\n")
        server = start_sim(scenario, {"model_path": "/m"}, Path(tmp))
        try:
            yield server
        finally:
            server.stop()


def wait_for(predicate, timeout_s: float = 20.0, what: str = "condition",  # type: ignore[no-untyped-def]
             interval_s: float = 0.02):
    """Poll ``predicate`` every ``interval_s`` until it returns a truthy value (returned) or fail the test
    at the deadline."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def bench_result(tok_s: float) -> BenchResult:
    """A made-up benchmark result with this tok/s@C16, for tests that record runs without measuring."""
    stats = {"mean": 1.0, "p50": 1.0, "p90": 2.0, "p99": 3.0}
    return BenchResult(tok_s=tok_s, window_tok_s=(tok_s,), request_throughput=1.0, per_user_tok_s=10.0,
                       ttft_ms=stats, tpot_ms=stats, itl_ms=stats, e2e_ms=stats, completed=10, failed=0,
                       output_tokens=100, output_chunks=50, achieved_concurrency=16.0, concurrency=16,
                       held_concurrency=True, accept_length=None, duration_s=1.0)


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL server (pgserver's bundled binaries) for the session; its SQLAlchemy URL."""
    import warnings

    pgserver = pytest.importorskip("pgserver")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(tmp_path_factory.mktemp("postgres"), cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


@pytest.fixture
def fresh_postgres_db(postgres_url: str) -> str:
    """A new, empty database on the session's PostgreSQL server; its URL."""
    import uuid

    from sqlalchemy import create_engine, text

    from db.location import database

    name = f"t{uuid.uuid4().hex[:12]}"
    engine = create_engine(database(postgres_url).url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return postgres_url.replace("/postgres?", f"/{name}?", 1)
