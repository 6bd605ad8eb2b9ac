"""The sweep service: a sweep submitted to a Ray cluster as a Ray Job, so it outlives the terminal.

``submit`` stages what the job needs in a folder that travels as the job's ``working_dir`` (the
project's packages, the space file and its scenario), and starts ``tuner sweep --address auto`` there
(Ray puts that folder first on the job's ``PYTHONPATH``, so the driver and its GPU-group actors run
this project's code). The database stays where ``--db`` says: a path the head node can write (made
absolute here) or a SQLAlchemy URL. Jobs are told apart from other Ray jobs by their metadata, which
also carries the study, database, budget and owner that ``jobs`` reads back. ``stop`` is Ray's stop
(SIGTERM to the driver, which stops its servers and records the trials in flight as interrupted) with
a grace period long enough for that, so submitting the same sweep again resumes it.
"""

from __future__ import annotations

import getpass
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from core.errors import ClusterError, ConfigError, StudyError, TunerError
from db.location import database

METADATA_KEY = "sglang_tuner"
PACKAGES = ("core", "db", "tuner", "workers", "search_spaces")
STOP_GRACE_S = 120  # Ray SIGKILLs a stopped job's driver after this (its default, 3 s, is too short)
JOB_DIR = "job"
AGENT_WAIT_S = 60.0  # a cluster that just started answers "no available agent, try again later" this long


class JobState(StrEnum):
    """A submitted sweep's state: Ray's job states, plus WAITING (running, no GPU group has its GPUs)."""

    PENDING = "pending"
    WAITING = "waiting for GPUs"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def finished(self) -> bool:
        """True once the job's driver has ended."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED)


@dataclass(frozen=True)
class SubmittedSweep:
    """What ``submit`` returns: the job's id (for ``logs``/``stop``), the study, and the command it runs."""

    job_id: str
    study: str
    entrypoint: str


@dataclass(frozen=True)
class SweepJob:
    """One submitted sweep as ``tuner jobs`` lists it; progress is None when its database is unreadable here."""

    job_id: str
    study: str
    state: JobState
    launched: int | None
    budget: int
    best_tok_s: float | None
    started: datetime | None
    owner: str
    db: str


def dashboard_address(address: str) -> str:
    """The Ray dashboard's HTTP address (``http://HEAD:8265``); ConfigError for anything else."""
    if not re.fullmatch(r"https?://[^\s/:]+(:\d{1,5})?/?", address):
        raise ConfigError(f"--address {address}: expected the Ray dashboard's address, e.g. http://HEAD:8265")
    return address.rstrip("/")


def _client(address: str) -> Any:
    import logging

    from ray.job_submission import JobSubmissionClient

    for chatty in ("ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk",
                   "ray._private.runtime_env.packaging"):  # "Uploading package ...", "WebSocket closed ..."
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        return JobSubmissionClient(dashboard_address(address))
    except ConnectionError as exc:
        raise ClusterError(f"--address {address}: no Ray dashboard answers there ({_first_line(exc)}); "
                           "is `ray start --head` running, with its dashboard?") from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def submit(address: str, space: Path, db: str, study: str, budget: int, sweep_args: Sequence[str]) -> SubmittedSweep:
    """Submit ``tuner sweep`` on ``space`` as a Ray Job and return at once (see module docstring)."""
    from tuner.space_loader import load_space

    loaded = load_space(space)
    where = database(db)
    db_where = str(where.path) if where.path is not None else db
    job_id = f"tuner-{_slug(study)}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    staged = _stage(space, loaded.file.scenario, job_id)
    space_arg = f"{JOB_DIR}/{space.name}"
    words = ["tuner", "sweep", "--space", space_arg, "--db", db_where, "--study", study, "--budget", str(budget),
             "--address", "auto", *sweep_args]
    entrypoint = " ".join(_quote(w) for w in words)
    metadata = {METADATA_KEY: "sweep", "study": study, "db": db_where, "budget": str(budget),
                "owner": getpass.getuser(), "space": loaded.name}
    client = _client(address)
    runtime_env = {"working_dir": str(staged), "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(STOP_GRACE_S)}}
    deadline = time.monotonic() + AGENT_WAIT_S
    try:
        while True:
            try:
                client.submit_job(entrypoint=entrypoint, submission_id=job_id, metadata=metadata,
                                  runtime_env=runtime_env)
                break
            except (RuntimeError, ValueError) as exc:  # a head that just started has no job agent yet
                if "try again later" not in str(exc) or time.monotonic() > deadline:
                    raise ClusterError(f"submitting the sweep to {address} failed: {_first_line(exc)}") from exc
                time.sleep(1.0)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return SubmittedSweep(job_id, study, entrypoint)


def _stage(space: Path, scenario: str | None, job_id: str) -> Path:
    """A folder with the project's packages and ``job/`` holding the space, its scenario and the job id.

    The id makes every submission's package unique: Ray names the uploaded package by a hash of its
    files and deletes it when the job that uploaded it ends, so a resubmission of the same sweep that
    reused the first one's package could find it gone (``Failed to download runtime_env file package``)."""
    import tuner

    root = Path(tuner.__file__).resolve().parent.parent
    out = Path(tempfile.mkdtemp(prefix="tuner-job-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(root / package, out / package, ignore=ignore)
    (out / JOB_DIR).mkdir()
    (out / JOB_DIR / "submission.txt").write_text(f"{job_id}\n")
    shutil.copy2(space, out / JOB_DIR / space.name)
    if scenario:
        relative = Path(scenario)
        if relative.is_absolute() or ".." in relative.parts:
            shutil.rmtree(out, ignore_errors=True)
            raise ConfigError(f"{space}: scenario {scenario!r} must lie beside the space file (a relative path "
                              "below its folder) to travel with a submitted sweep")
        (out / JOB_DIR / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(space.parent / relative, out / JOB_DIR / relative)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")[:60] or "sweep"


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


def list_jobs(address: str) -> list[SweepJob]:
    """The sweeps submitted to the cluster at ``address``, newest first."""
    client = _client(address)
    rows = []
    for job in client.list_jobs():
        meta = job.metadata or {}
        if meta.get(METADATA_KEY) != "sweep":
            continue
        state = _state(address, job)
        launched, best = _progress(meta.get("db", ""), meta.get("study", ""))
        started = datetime.fromtimestamp(job.start_time / 1000, UTC) if job.start_time else None
        rows.append(SweepJob(job.submission_id or job.job_id or "?", meta.get("study", "?"), state, launched,
                             int(meta.get("budget", "0") or 0), best, started, meta.get("owner", "?"),
                             meta.get("db", "?")))
    return sorted(rows, key=lambda r: r.started or datetime.min.replace(tzinfo=UTC), reverse=True)


def _state(address: str, job: Any) -> JobState:
    state = JobState(str(job.status.value).lower())
    if state is JobState.RUNNING and job.job_id and _waiting_for_gpus(address, job.job_id):
        return JobState.WAITING
    return state


def _waiting_for_gpus(address: str, driver_job_id: str) -> bool:
    """Does the job have GPU-group actors waiting for GPUs and none that got them?"""
    from ray.util.state import list_actors

    try:
        actors = list_actors(address=dashboard_address(address), filters=[("job_id", "=", driver_job_id)],
                             raise_on_missing_output=False)
    except Exception:  # the state API is best effort here: a listing must not fail on it
        return False
    groups = [a for a in actors if a.class_name == "GPUGroup"]
    return bool(groups) and not any(a.state == "ALIVE" for a in groups) and any(
        a.state == "PENDING_CREATION" for a in groups)


def _progress(db: str, study: str) -> tuple[int | None, float | None]:
    """(launches so far, best tok/s@C16) of ``study`` in ``db``; (None, None) when unreadable from here."""
    from tuner.results import load_results

    try:
        results = load_results(db, study)
    except StudyError:  # the database is there; the sweep has not started yet
        return 0, None
    except (TunerError, OSError):
        return None, None
    best = results.best()
    return results.launches(), results.score(best) if best else None


def _client_of_job(address: str, job_id: str) -> Any:
    """A client of the cluster at ``address`` that has the submitted sweep ``job_id``; StudyError when
    there is none."""
    client = _client(address)
    try:
        client.get_job_info(job_id)
    except RuntimeError as exc:
        known = ", ".join(j.job_id for j in list_jobs(address)) or "none"
        raise StudyError(f"no job {job_id!r} on {address} (sweeps: {known})") from exc
    return client


def logs(address: str, job_id: str, follow: bool) -> Iterator[str]:
    """The job's output so far; with ``follow``, then what it prints until it ends."""
    client = _client_of_job(address, job_id)
    if not follow:
        yield client.get_job_logs(job_id)
        return
    import asyncio

    stream = client.tail_job_logs(job_id)
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(stream.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(stream.aclose())
        loop.close()


def stop(address: str, job_id: str, timeout_s: float = STOP_GRACE_S + 30) -> JobState:
    """Stop the sweep gracefully and wait until its driver has ended; its final state."""
    client = _client_of_job(address, job_id)
    client.stop_job(job_id)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = JobState(str(client.get_job_status(job_id).value).lower())
        if state.finished:
            return state
        time.sleep(0.5)
    raise ClusterError(f"job {job_id} did not stop within {timeout_s:g} s")
