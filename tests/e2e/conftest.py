"""End-to-end helpers: run the real `tuner` CLI as a subprocess with an isolated HOME (Ray writes
its auth token there) and a copy of the quick e2e space."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from db.store import RunRow, Store

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TUNER = [sys.executable, "-m", "tuner.cli"]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory with the e2e space and scenario (unique paths, so our servers are recognisable)."""
    for name in ("e2e-space.yaml", "e2e-scenario.yaml"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    (tmp_path / "home").mkdir()
    return tmp_path


def tuner_env(workdir: Path) -> dict[str, str]:
    """Environment for a tuner subprocess: isolated HOME, no colour, wide output."""
    env = dict(os.environ)
    env.update({"HOME": str(workdir / "home"), "NO_COLOR": "1", "COLUMNS": "200",
                "RAY_USAGE_STATS_ENABLED": "0"})
    return env


def run_tuner(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `tuner <args>` in ``workdir`` and wait."""
    return subprocess.run([*TUNER, *args], cwd=workdir, env=tuner_env(workdir), capture_output=True, text=True,
                          timeout=timeout)


def stored_runs(db: Path, study: str) -> list[RunRow]:
    """The runs a sweep recorded in the database ``db`` (read-only)."""
    store = Store(db, read_only=True)
    try:
        sweep = store.sweep(study)
        assert sweep is not None, f"no sweep {study!r} in {db}"
        return store.runs(sweep.id)
    finally:
        store.close()


def our_servers(workdir: Path) -> list[psutil.Process]:
    """Simulated servers started for this workdir's scenario (found by their environment, to check only)."""
    found = []
    scenario = str(workdir / "e2e-scenario.yaml")
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "workers.sim" in cmd and proc.environ().get("SGLANG_SIM_SCENARIO") == scenario:
                found.append(proc)
        except psutil.Error:
            continue
    return found
