"""The ``tuner`` command line. It only parses arguments, calls the library and turns
:class:`tuner.errors.TunerError` into a one-line message and the error's exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from tuner.errors import TunerError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the fastest SGLang launch configuration for a model on your GPUs.")
console = Console()
err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])

SpaceArg = Annotated[Path, typer.Argument(help="Search-space YAML file.")]


def _run(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except TunerError as exc:
        err_console.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


@app.command()
def validate(
    space: SpaceArg,
    sglang_version: Annotated[str, typer.Option(help="SGLang version whose flags to check.")] = "0.5.23",
    gpu: Annotated[str | None, typer.Option(help="Target GPU architecture, e.g. sm_90, sm_100, sm_120.")]
    = None,
) -> None:
    """Check a search space and print its parameters, size and what the hardware rules prune."""
    from tuner.flags import FlagTable
    from tuner.space import load_space
    from tuner.views import print_validation

    def go() -> None:
        table = FlagTable.bundled(sglang_version)
        loaded = load_space(space, table, gpu)
        print_validation(console, loaded, table.version, gpu or loaded.file.gpu)

    _run(go)


@app.command()
def render(
    space: SpaceArg,
    set_: Annotated[list[str] | None, typer.Option("--set", help="param=value (repeatable).")] = None,
    sglang_version: Annotated[str, typer.Option(help="SGLang version to render for.")] = "0.5.23",
) -> None:
    """Print the exact launch command and env of one configuration (unset params: first choice)."""
    from tuner.flags import FlagTable
    from tuner.render import render as render_cmd
    from tuner.render import shell_command
    from tuner.space import load_space, parse_assignments

    def go() -> None:
        table = FlagTable.bundled(sglang_version)
        loaded = load_space(space, table)
        config = loaded.from_assignments(parse_assignments(set_ or [], loaded))
        engine = loaded.engine()
        cmd = render_cmd(config, table, engine.__class__(kind="sglang", python=engine.python))
        console.print(shell_command(cmd), markup=False, highlight=False, soft_wrap=True)

    _run(go)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="tuner")


if __name__ == "__main__":
    sys.exit(main())
