"""Two `tuner sweep` processes on one database and study split the work: the baseline launched
once, the budget exact, no configuration launched twice, nothing left running; on SQLite and on a
real PostgreSQL, which give the same results."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from db.location import database
from tests.conftest import SPACES
from tuner.space_loader import load_space
from tuner.study_db import open_study
from workers.sim.offline import OfflineModel

CLI = [sys.executable, "-m", "tuner.cli"]


SPACE = str(SPACES / "hard-deepseek-v3-h200.yaml")


def _sql(db: str, query: str) -> list[tuple[Any, ...]]:
    engine = create_engine(database(db).url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(query))]
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    return str(request.getfixturevalue("fresh_postgres_db"))


def _queue_one_configuration_twice(db: str, study: str) -> None:
    """Two queued copies of a configuration that runs: whichever drivers pop them, one is launched and
    the other answered from its measurement, however the two processes are scheduled."""
    space = load_space(SPACE)
    assert space.file.scenario
    model = OfflineModel(Path(SPACE).parent / space.file.scenario)
    listing = space.listing()
    assert listing is not None
    out = space.file.benchmark.output_len
    runs = next(p for p in listing if model.verdict(space.from_params(p), 16, out).tok_s is not None)
    queued = open_study(db, study)
    for _ in range(2):
        queued.enqueue_trial(runs)


def test_two_drivers_on_one_study_split_the_budget(tmp_path: Path, shared_db: str) -> None:
    db = shared_db
    _queue_one_configuration_twice(db, "shared")
    args = ["sweep", "--offline", "--space", SPACE, "--budget", "24", "--db", db, "--study", "shared"]
    drivers = [subprocess.Popen([*CLI, *args, "--seed", str(seed)], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for d in drivers:
        out, err = d.communicate(timeout=300)
        assert d.returncode == 0, err + out
    runs = _sql(db, "SELECT config_key, status, baseline, repeat_of, remeasure, trial_number FROM tuner_trial_runs")
    answered = _sql(db, "SELECT argv, gpu_ids, node, cached_from FROM tuner_trial_runs WHERE status = 'cached'")
    owners = dict(_sql(db, "SELECT t.number, a.value_json FROM trial_system_attributes a "  # type: ignore[arg-type]
                           "JOIN trials t ON t.trial_id = a.trial_id WHERE a.key = 'driver'"))
    states = {str(state).rsplit(".", 1)[-1] for state, in _sql(db, "SELECT state FROM trials")}
    left = _sql(db, "SELECT (SELECT count(*) FROM tuner_launch_claims), (SELECT count(*) FROM tuner_drivers)")[0]
    launched = [r for r in runs if r[1] in ("ok", "infeasible") and (r[3] is None or r[4])]
    assert len(launched) == 24, "the budget is exact across drivers"
    assert sum(1 for r in launched if r[2]) == 1, "the baseline launched once"
    first_launches = collections.Counter(r[0] for r in launched if r[3] is None)
    assert max(first_launches.values()) == 1, "no configuration launched twice"
    assert len({owners[r[5]] for r in launched}) == 2, "both drivers launched"
    assert states <= {"COMPLETE", "FAIL"} and left == (0, 0)
    assert answered, "the second copy of the queued configuration was answered from the first's measurement"
    for argv, gpu_ids, node, cached_from in answered:  # not launched: no command line or GPUs of its own
        assert (json.loads(argv) if isinstance(argv, str) else argv) == [] and node == "" and cached_from is not None
        assert (json.loads(gpu_ids) if isinstance(gpu_ids, str) else gpu_ids) == []
    for command in (["show"], ["export", "-o", str(tmp_path / "l.sh")], ["report", "-o", str(tmp_path / "r.html")]):
        proc = subprocess.run([*CLI, *command, "--db", db, "--study", "shared"], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr


def test_postgresql_and_sqlite_give_the_same_results(tmp_path: Path, fresh_postgres_db: str) -> None:
    shown = []
    for db in (str(tmp_path / "one.db"), fresh_postgres_db):
        args = ["sweep", "--offline", "--space", SPACE, "--budget", "12", "--db", db, "--seed", "4"]
        proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        show = subprocess.run([*CLI, "show", "--json", "--db", db], capture_output=True, text=True, timeout=120)
        assert show.returncode == 0, show.stderr
        trials = json.loads(show.stdout)["trials"]
        shown.append(sorted((t["trial_number"], t["status"], t["tok_s"], json.dumps(t["params"], sort_keys=True))
                            for t in trials))
    assert shown[0] == shown[1] and len(shown[0]) >= 12


def test_the_dashboard_reads_a_postgresql_study(fresh_postgres_db: str) -> None:
    import httpx

    from tuner.dashboard import make_dashboard, serve_in_thread

    args = ["sweep", "--offline", "--space", SPACE, "--budget", "6", "--db", fresh_postgres_db, "--study", "pg"]
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    server = make_dashboard(fresh_postgres_db, "127.0.0.1", 0)
    serve_in_thread(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        studies = httpx.get(f"{base}/api/studies", timeout=30).json()["study_summaries"]
        assert [s["study_name"] for s in studies] == ["pg"]
        trials = httpx.get(f"{base}/api/studies/{studies[0]['study_id']}", timeout=30).json()["trials"]
        assert sum(any(a["key"] == "tok_s_c16" for a in t["user_attrs"]) for t in trials) >= 3
    finally:
        server.shutdown()
        server.server_close()
