"""The ``tuner`` command line. It only parses arguments, calls the library and turns
:class:`core.errors.TunerError` into a one-line message and the error's exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from core.errors import TunerError
from core.types import BenchConfig, RunStatus

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the fastest SGLang launch configuration for a model on your GPUs.")
console = Console(width=None if sys.stdout.isatty() else 180)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 180)
F = TypeVar("F", bound=Callable[..., Any])
BENCH = BenchConfig()  # the benchmark's defaults, written once (core.types)

SpaceArg = Annotated[Path, typer.Argument(help="Search-space YAML file.")]


def _run(fn: Callable[[], Any]) -> Any:
    import logging

    logging.getLogger("optuna").setLevel(logging.WARNING)
    try:
        return fn()
    except TunerError as exc:
        err_console.print(f"error: {one_line(str(exc))}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


def one_line(text: str) -> str:
    """``text`` with every character that would break or hide the line (a user's input can hold
    any: line and record separators, escapes) written as its Python escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


VersionOpt = Annotated[str, typer.Option("--sglang-version", help="SGLang version (its bundled flag table).")]
PythonOpt = Annotated[str | None, typer.Option("--sglang-python",
                                               help="Use the flags of the SGLang this Python imports instead.")]


def _flag_table(python: str | None, version: str) -> Any:
    from core.flags import FlagTable, introspect

    return introspect(python) if python else FlagTable.bundled(version)


@app.command()
def validate(
    space: SpaceArg,
    sglang_version: VersionOpt = "0.5.23",
    sglang_python: PythonOpt = None,
    gpu: Annotated[str | None, typer.Option(help="Target GPU architecture, e.g. sm_90, sm_100, sm_120.")]
    = None,
) -> None:
    """Check a search space and print its parameters, size and what the hardware rules prune."""
    from tuner.space_loader import load_space
    from tuner.views import print_validation

    def go() -> None:
        table = _flag_table(sglang_python, sglang_version)
        loaded = load_space(space, table, gpu)
        print_validation(console, loaded, table.version, gpu or loaded.file.gpu)

    _run(go)


@app.command()
def render(
    space: SpaceArg,
    set_: Annotated[list[str] | None, typer.Option("--set", help="param=value (repeatable).")] = None,
    sglang_version: VersionOpt = "0.5.23",
    sglang_python: PythonOpt = None,
) -> None:
    """Print the exact launch command and env of one configuration (unset params: first choice)."""
    import dataclasses

    from core.render import render as render_cmd
    from core.render import shell_command
    from core.types import EngineKind
    from tuner.space_loader import load_space, parse_assignments

    def go() -> None:
        table = _flag_table(sglang_python, sglang_version)
        loaded = load_space(space, table)
        config = loaded.from_assignments(parse_assignments(set_ or [], loaded))
        engine = loaded.engine()
        cmd = render_cmd(config, table, dataclasses.replace(engine, kind=EngineKind.SGLANG, scenario=None))
        console.print(shell_command(cmd), markup=False, highlight=False, soft_wrap=True)

    _run(go)


@app.command()
def bench(
    url: Annotated[str, typer.Option(help="Base URL of a running SGLang server.")],
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent streams (closed loop).")] = BENCH.concurrency,
    input_len: Annotated[int, typer.Option(min=1, help="Input tokens per request.")] = BENCH.input_len,
    output_len: Annotated[int, typer.Option(min=2, help="Output tokens per request (ignore_eos).")]
    = BENCH.output_len,
    warmup: Annotated[float, typer.Option(min=0, help="Seconds of warm-up, not counted.")] = BENCH.warmup_s,
    duration: Annotated[float, typer.Option(min=0.1, help="Seconds of the measurement window.")]
    = BENCH.duration_s,
    repeats: Annotated[int, typer.Option(min=1, help="Consecutive windows (median and spread).")] = BENCH.repeats,
    api: Annotated[str, typer.Option(help="generate (native) or completions (OpenAI).")] = "generate",
    api_key: Annotated[str | None, typer.Option(envvar="SGLANG_API_KEY",
                                                help="The server's --api-key (sent as a Bearer token).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Benchmark any running SGLang server: decode tok/s at concurrency C and latency percentiles."""
    import asyncio
    import json

    from core.errors import ConfigError
    from core.types import BenchConfig
    from tuner.views import print_bench
    from workers.bench import run_benchmark

    def go() -> None:
        if api not in ("generate", "completions"):
            raise ConfigError(f"--api {api!r}: use generate or completions")
        cfg = BenchConfig(concurrency=concurrency, input_len=input_len, output_len=output_len,
                          warmup_s=warmup, duration_s=duration, repeats=repeats, api=api)
        result = asyncio.run(run_benchmark(url.rstrip("/"), cfg, api_key=api_key))
        if as_json:
            print(json.dumps(result.as_dict(), indent=2))
        else:
            print_bench(console, result, url)

    _run(go)


def _demo_space() -> Path:
    from importlib import resources

    return Path(str(resources.files("search_spaces").joinpath("demo-sim.yaml")))


DbOpt = Annotated[str, typer.Option("--db", help="Sweep database: a SQLite file, or a SQLAlchemy URL such as "
                                                  "postgresql://user@host/db (shared by several drivers).")]
StudyOpt = Annotated[str | None, typer.Option("--study", help="Study name (default: the latest).")]


@app.command()
def sweep(
    space: Annotated[Path | None, typer.Option(help="Search-space YAML (default: the bundled no-GPU demo).")]
    = None,
    budget: Annotated[int, typer.Option(min=1, max=1_000_000, help="Distinct configurations to launch.")] = 40,
    confirm: Annotated[int, typer.Option(min=0, help="Then measure the N best once more; rank by median.")]
    = 0,
    db: DbOpt = "tuner.db",
    study: Annotated[str | None, typer.Option(help="Study name (default: the space's name).")] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: a local Ray).")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs of the local Ray (fake ones for the simulator).")]
    = None,
    groups: Annotated[int | None, typer.Option(min=1, help="At most this many GPU groups.")] = None,
    sglang_python: Annotated[str | None, typer.Option(help="Python that has SGLang on the GPU nodes.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed.")] = None,
    offline: Annotated[bool, typer.Option(help="Answer trials from the scenario's model: no Ray, no servers "
                                                   "(simulated spaces only).")] = False,
    sampler: Annotated[str | None, typer.Option(help="Search strategy: model (default), model-dense, model-local, "
                                                     "model-only, tpe, random, coordinate, gp.")] = None,
    slo: Annotated[str | None, typer.Option(help="Objectives a configuration must meet, e.g. "
                                                 "'ttft_p99<2s,itl_p99<50ms,per_user_tok_s>30' (overrides the "
                                                 "space's slo).")] = None,
    profile_best: Annotated[bool, typer.Option(help="Then launch the best once more and record where its decode "
                                                    "GPU time goes (SGLang's profiler, top kernels).")] = False,
    front_at: Annotated[str | None, typer.Option(help="Then measure the fastest configurations of the trade-off at "
                                                      "these concurrencies too, e.g. 1,4,64.")] = None,
) -> None:
    """Launch, benchmark and rank SGLang configurations until the budget is spent (resumable)."""
    import signal

    from tuner.follow_up import parse_concurrencies
    from tuner.live import SweepView
    from tuner.results import load_results
    from tuner.study import Sweep
    from tuner.sweep_control import SweepInterrupted, request_stop
    from tuner.sweep_state import SweepOptions
    from tuner.views import print_summary

    if space is None:
        space = _demo_space()
        console.print(f"no --space given: running the bundled no-GPU demo ({space})", markup=False)

    def on_signal(signum: int, frame: object) -> None:
        if request_stop():
            raise KeyboardInterrupt
        os.write(2, b"stopping: servers are being stopped and trials in flight recorded ...\n")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    opts = SweepOptions(space_path=str(space), db_path=str(db), study_name=study, budget=budget, confirm=confirm,
                        address=address, gpus=gpus, max_groups=groups, sglang_python=sglang_python, seed=seed,
                        offline=offline, sampler=sampler, slo=slo, profile_best=profile_best,
                        front_at=_run(lambda: parse_concurrencies(front_at)) if front_at else ())

    def go() -> None:
        runner = Sweep(opts, lambda name, b, scale: SweepView(console, name, b, scale))
        try:
            done = runner.run()
        except (SweepInterrupted, KeyboardInterrupt):
            err_console.print("interrupted: servers stopped; run the same command again to finish the budget")
            raise typer.Exit(130) from None
        print_summary(console, load_results(db, done.study_name, with_notices=True))

    _run(go)


@app.command()
def show(
    db: DbOpt = "tuner.db",
    study: StudyOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print every trial as JSON.")] = False,
    limit: Annotated[int | None, typer.Option(help="Show at most N trials.")] = None,
) -> None:
    """List a sweep's trials sorted by tok/s@C16, with failures and their reasons."""
    import json
    from dataclasses import asdict

    from tuner.lead import lead
    from tuner.pareto import front
    from tuner.results import load_results
    from tuner.views import print_summary, runs_table

    def go() -> None:
        results = load_results(db, study, with_notices=True)
        if as_json:
            rows = [{**{k: v for k, v in asdict(r).items() if k != "log_tail"},
                     "tok_s_samples": results.samples(r.config_key) if r.status == RunStatus.OK else [],
                     "sglang_notices": [asdict(n) for n in results.notices.get(r.trial_number, ())]}
                    for r in results.ranked()]
            pareto = [{"trial_number": p.run.trial_number, "tok_s": p.tok_s, "ttft_p99_ms": p.ttft_p99_ms,
                       "per_user_tok_s": p.per_user_tok_s} for p in front(results)]
            profiled = results.best_profile()
            found = lead(results)
            print(json.dumps({"study": results.sweep.study_name, "time_scale": results.sweep.time_scale,
                              "learned_rules": list(results.rules), "pareto_front": pareto,
                              "lead": {**asdict(found), "verdict": found.verdict,
                                       "standard_errors": found.json_standard_errors} if found else None,
                              "best_profile": {"trial_number": profiled.trial_number, **(profiled.profile or {})}
                              if profiled else None, "trials": rows},
                             indent=2, default=str))
            return
        console.print(runs_table(results, limit))
        print_summary(console, results)

    _run(go)


@app.command()
def export(
    db: DbOpt = "tuner.db",
    study: StudyOpt = None,
    trial: Annotated[int | None, typer.Option(help="Trial number (default: the best).")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here (default: stdout).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="sh (launch script), json, or yaml (SGLang --config).")]
    = "sh",
    pick: Annotated[str | None, typer.Option(help="The fastest configuration meeting these objectives, e.g. "
                                                  "'ttft_p99<=200ms,per_user_tok_s>=40' (a point of the front).")]
    = None,
) -> None:
    """Export a measured configuration: the exact command that was benchmarked."""
    from tuner.export import export_text, write_output

    def go() -> None:
        text = export_text(db, study, trial, fmt, pick)
        if output is None:
            sys.stdout.write(text)
            return
        write_output(output, text, 0o755 if fmt == "sh" else None)
        err_console.print(f"wrote {output}", markup=False)

    _run(go)


@app.command()
def dashboard(
    db: DbOpt = "tuner.db",
    host: Annotated[str, typer.Option(help="Interface to bind (no authentication: keep it local).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port.")] = 8080,
) -> None:
    """Serve optuna-dashboard on the sweep database (metrics, logs and launch scripts per trial)."""
    from tuner.dashboard import make_dashboard

    def go() -> None:
        server = make_dashboard(db, host, port)
        console.print(f"optuna-dashboard on http://{host}:{port}/ (Ctrl-C to stop)", markup=False)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()

    _run(go)


@app.command()
def report(
    db: DbOpt = "tuner.db",
    study: StudyOpt = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML file to write.")] = Path("report.html"),
) -> None:
    """Write one self-contained HTML report (works offline)."""
    from tuner.report import write_report

    def go() -> None:
        write_report(db, study, output)
        console.print(f"wrote {output}", markup=False)

    _run(go)


def _register_service() -> None:
    from tuner.cli_service import register

    register(app, console, _run)


_register_service()


def main() -> None:
    """Console-script entry point."""
    app(prog_name="tuner")


if __name__ == "__main__":
    main()
