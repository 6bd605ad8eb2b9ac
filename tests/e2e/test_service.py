"""Sweeps as Ray Jobs (`tuner submit/jobs/logs/stop`) on a real local Ray cluster with its dashboard:
a head started here with 4 fake GPUs, jobs submitted over the dashboard's address, the simulated engine."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from tests.conftest import wait_for
from tests.e2e.conftest import our_servers, run_tuner, stored_runs
from tuner.service import JobState, list_jobs

pytestmark = pytest.mark.e2e
DEADLINE_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head with 4 fake GPUs and its dashboard; jobs find `tuner` on the PATH it was started with."""
    from ray.cluster_utils import Cluster

    home = tmp_path_factory.mktemp("home")
    saved = {k: os.environ.get(k) for k in ("HOME", "PATH", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update({"HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0",
                       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    port = _free_port()
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={
        "num_cpus": 2, "num_gpus": 4, "include_dashboard": True, "dashboard_host": "127.0.0.1",
        "dashboard_port": port, "dashboard_agent_listen_port": _free_port()})  # not Ray's fixed 52365
    address = f"http://127.0.0.1:{port}"
    try:
        _await(lambda: _answers(address), "the Ray dashboard to answer")
        yield address
    finally:
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _answers(address: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{address}/api/version", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _await(condition: Callable[[], object], what: str) -> None:
    """Poll a condition that asks the dashboard over HTTP: gently (five times a second)."""
    wait_for(condition, DEADLINE_S, what, interval_s=0.2)


def _submit(workdir: Path, address: str, study: str, budget: int, db: str = "sweeps.db") -> str:
    proc = run_tuner(workdir, "submit", "--space", "e2e-space.yaml", "--budget", str(budget), "--db", db,
                     "--study", study, "--address", address, "--seed", "1")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout.split()[1]


def _state(address: str, job_id: str) -> JobState:
    return next(j.state for j in list_jobs(address) if j.job_id == job_id)


def test_submit_returns_at_once_and_the_sweep_finishes_without_it(workdir: Path, dashboard: str) -> None:
    job = _submit(workdir, dashboard, "alone", budget=6)  # the submitting process has exited here
    assert not _state(dashboard, job).finished  # a 6-launch sweep cannot have run yet
    _await(lambda: _state(dashboard, job).finished, "the sweep to end")
    assert _state(dashboard, job) is JobState.SUCCEEDED
    runs = stored_runs(workdir / "sweeps.db", "alone")
    assert sum(r.status.launched for r in runs) == 6
    row = next(j for j in list_jobs(dashboard) if j.job_id == job)
    assert (row.study, row.launched, row.budget) == ("alone", 6, 6) and row.best_tok_s
    logs = run_tuner(workdir, "logs", job, "--follow", "--address", dashboard)
    assert logs.returncode == 0 and "best: trial" in logs.stdout, logs.stderr
    assert not our_servers(workdir)


def test_two_sweeps_share_the_gpus_without_oversubscribing(workdir: Path, dashboard: str) -> None:
    first = _submit(workdir, dashboard, "first", budget=12)
    second = _submit(workdir, dashboard, "second", budget=4)
    seen: set[JobState] = set()

    def both_done() -> bool:
        states = {j.job_id: j.state for j in list_jobs(dashboard)}
        seen.add(states[second])
        return states[first].finished and states[second].finished

    _await(both_done, "both sweeps to end")
    assert _state(dashboard, first) is JobState.SUCCEEDED and _state(dashboard, second) is JobState.SUCCEEDED
    assert JobState.WAITING in seen, seen  # the second waited while the first held every GPU
    runs = stored_runs(workdir / "sweeps.db", "first") + stored_runs(workdir / "sweeps.db", "second")
    spans = [(r.started_at, r.finished_at, gpu) for r in runs if r.status.launched and r.started_at
             and r.finished_at for gpu in r.gpu_ids]
    for i, (start, end, gpu) in enumerate(spans):
        overlapping = [s for s in spans[i + 1:] if s[2] == gpu and s[0] < end and start < s[1]]
        assert not overlapping, f"GPU {gpu} ran two servers at once"
    assert len({gpu for *_, gpu in spans}) == 4


def test_stop_then_submit_again_loses_and_duplicates_nothing(workdir: Path, dashboard: str) -> None:
    job = _submit(workdir, dashboard, "stopped", budget=16)
    db = workdir / "sweeps.db"
    _await(lambda: db.exists() and _launched(db, "stopped") >= 3, "three launches")
    stop = run_tuner(workdir, "stop", job, "--address", dashboard)
    assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stderr + stop.stdout
    before = stored_runs(db, "stopped")
    assert any(r.status == "interrupted" for r in before)  # the trials in flight were recorded
    study = optuna.load_study(study_name="stopped", storage=f"sqlite:///{db}")
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert not our_servers(workdir)
    assert _launched(db, "stopped") < 16
    again = _submit(workdir, dashboard, "stopped", budget=16)
    _await(lambda: _state(dashboard, again).finished, "the resumed sweep to end")
    after = stored_runs(db, "stopped")
    said = run_tuner(workdir, "logs", again, "--address", dashboard).stdout[-3000:]
    assert _state(dashboard, again) is JobState.SUCCEEDED, said
    first = [r for r in after if r.status.launched and r.repeat_of is None]
    remeasured = [r for r in after if r.status.launched and r.repeat_of is not None and r.remeasure]
    assert len(first) + len(remeasured) == 16, said  # the budget: a surprise's re-measurement counts
    assert len({r.config_key for r in first}) == len(first), "a configuration launched twice"
    kept = {(r.trial_number, r.status, r.tok_s) for r in before if r.status.launched}
    assert kept <= {(r.trial_number, r.status, r.tok_s) for r in after}


def _launched(db: Path, study: str) -> int:
    try:
        return sum(r.status.launched for r in stored_runs(db, study))
    except AssertionError:  # the sweep row is not there yet
        return 0


def test_service_commands_refuse_bad_input_in_one_line(workdir: Path, dashboard: str) -> None:
    bad = run_tuner(workdir, "jobs", "--address", "127.0.0.1:6379")
    assert bad.returncode == 2 and "http://HEAD:8265" in bad.stderr and "Traceback" not in bad.stderr
    closed = run_tuner(workdir, "jobs", "--address", f"http://127.0.0.1:{_free_port()}")
    assert closed.returncode == 1 and "no Ray dashboard answers there" in closed.stderr, closed.stderr
    unknown = run_tuner(workdir, "stop", "tuner-nothing", "--address", dashboard)
    assert unknown.returncode == 1 and "no job 'tuner-nothing'" in unknown.stderr, unknown.stderr
