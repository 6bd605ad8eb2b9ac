"""The ``tuner submit/jobs/logs/stop`` commands: sweeps as Ray Jobs on a cluster (:mod:`tuner.service`).
Like :mod:`tuner.cli`, only parsing and printing."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

AddressOpt = Annotated[str, typer.Option(
    envvar="RAY_DASHBOARD_ADDRESS", help="The Ray dashboard of the cluster (what `ray job submit` takes).")]
JobArg = Annotated[str, typer.Argument(help="The job id `tuner submit` printed (see `tuner jobs`).")]
DEFAULT_ADDRESS = "http://127.0.0.1:8265"


@dataclass(frozen=True)
class _Output:
    """Where the commands print, and how the tool's errors become one line and an exit code."""

    console: Console
    run: Callable[[Callable[[], Any]], Any]


_out: list[_Output] = []  # set once by register()


def register(app: typer.Typer, console: Console, run: Callable[[Callable[[], Any]], Any]) -> None:
    """Add the service commands to ``app``; ``run`` turns the tool's errors into one line and an exit code."""
    _out[:] = [_Output(console, run)]
    for command in (submit, jobs, logs, stop):
        app.command()(command)


def submit(
    space: Annotated[Path, typer.Option(help="Search-space YAML (travels with the job, with its scenario).")],
    address: AddressOpt = DEFAULT_ADDRESS,
    budget: Annotated[int, typer.Option(min=1, max=1_000_000, help="Distinct configurations to launch.")] = 40,
    db: Annotated[str, typer.Option(help="Sweep database as the head node sees it: a path (made absolute) "
                                         "or a SQLAlchemy URL.")] = "tuner.db",
    study: Annotated[str | None, typer.Option(help="Study name (default: the space's name).")] = None,
    confirm: Annotated[int, typer.Option(min=0, help="Then measure the N best once more.")] = 0,
    groups: Annotated[int | None, typer.Option(min=1, help="At most this many GPU groups.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed.")] = None,
    sampler: Annotated[str | None, typer.Option(help="Search strategy (see `tuner sweep --help`).")] = None,
    slo: Annotated[str | None, typer.Option(help="Objectives, as for `tuner sweep --slo`.")] = None,
    sglang_python: Annotated[str | None, typer.Option(help="Python that has SGLang on the GPU nodes.")] = None,
    profile_best: Annotated[bool, typer.Option(help="Then profile the best (see `tuner sweep --help`).")] = False,
) -> None:
    """Submit a sweep to a Ray cluster as a Ray Job and return: it runs on without this terminal."""
    from tuner.service import submit as submit_job
    from tuner.space_loader import load_space

    out = _out[0]
    extra = [*_opt("--confirm", confirm or None), *_opt("--groups", groups), *_opt("--seed", seed),
             *_opt("--sampler", sampler), *_opt("--slo", slo), *_opt("--sglang-python", sglang_python),
             *(["--profile-best"] if profile_best else [])]

    def go() -> None:
        job = submit_job(address, space, db, study or load_space(space).name, budget, extra)
        out.console.print(f"submitted {job.job_id} (study {job.study})\n  follow it: tuner logs {job.job_id} "
                          f"--follow --address {address}\n  list sweeps: tuner jobs --address {address}",
                          markup=False, highlight=False)

    out.run(go)


def jobs(address: AddressOpt = DEFAULT_ADDRESS) -> None:
    """List the sweeps submitted to the cluster: state, launches, best so far."""
    from tuner.service import list_jobs

    out = _out[0]

    def go() -> None:
        table = Table("job", "study", "state", "launches", "best tok/s@C16", "started", "owner")
        for j in list_jobs(address):
            table.add_row(j.job_id, j.study, j.state.value, "?" if j.launched is None else f"{j.launched}/{j.budget}",
                          "-" if j.best_tok_s is None else f"{j.best_tok_s:.1f}",
                          f"{j.started:%Y-%m-%d %H:%M:%S}" if j.started else "-", j.owner)
        out.console.print(table)

    out.run(go)


def logs(job: JobArg, address: AddressOpt = DEFAULT_ADDRESS,
         follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until it ends.")] = False) -> None:
    """Print a submitted sweep's output."""
    from tuner.service import logs as job_logs

    def go() -> None:
        for text in job_logs(address, job, follow):
            sys.stdout.write(text)
            sys.stdout.flush()

    _out[0].run(go)


def stop(job: JobArg, address: AddressOpt = DEFAULT_ADDRESS) -> None:
    """Stop a submitted sweep gracefully (servers stopped, trials in flight recorded); submit it again to
    resume."""
    from tuner.service import stop as stop_job

    out = _out[0]

    def go() -> None:
        out.console.print(f"{job}: {stop_job(address, job).value}", markup=False, highlight=False)

    out.run(go)


def _opt(flag: str, value: object) -> list[str]:
    return [] if value is None else [flag, str(value)]
