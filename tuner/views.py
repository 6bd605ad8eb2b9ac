"""Rich renderings of spaces, trials and benchmark results for the terminal (no logic here)."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from tuner.space import Param, SearchSpace


def _domain(p: Param) -> str:
    if p.kind == "categorical":
        return ", ".join(map(str, p.choices))
    step = f" step {p.step:g}" if p.step else ""
    return f"{p.kind} [{p.low:g}, {p.high:g}]{step}{' log' if p.log else ''}"


def space_table(space: SearchSpace) -> Table:
    """The parameter table of a space."""
    table = Table(title=f"{space.name} ({space.path})", title_justify="left")
    for col in ("parameter", "sets", "values", "only when"):
        table.add_column(col)
    for p in space.params:
        sets = "composite" if p.target is None else (
            f"env {p.target[1]}" if p.target[0] == "env" else p.target[1])
        when = ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in p.conditions)
        table.add_row(p.name, sets, _domain(p), when)
    return table


def print_validation(console: Console, space: SearchSpace, version: str, arch: str | None) -> None:
    """What `tuner validate` prints: table, cardinality, pruned choices, forbid rules."""
    console.print(space_table(space))
    card = space.cardinality()
    size = "continuous (infinite)" if math.isinf(card) else f"{card:,}"
    console.print(f"SGLang {version}, GPU {arch or 'any (no hardware rules applied)'}: "
                  f"[bold]{size}[/bold] configurations after {len(space.forbid)} forbid rule(s)"
                  f" and hardware rules")
    for pruned in space.pruned:
        console.print(f"  pruned {pruned.param}: {pruned.reason}", soft_wrap=True)


def fmt_num(value: Any, digits: int = 1) -> str:
    """A number for a table cell, '-' for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def bench_table(result: Any, title: str) -> Table:
    """The metrics of one benchmark run."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for col in ("mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right")
    for name, stats in (("TTFT (ms)", result.ttft_ms), ("TPOT (ms)", result.tpot_ms),
                        ("ITL (ms)", result.itl_ms), ("E2E (ms)", result.e2e_ms)):
        table.add_row(name, *(fmt_num(stats[k], 2) for k in ("mean", "p50", "p90", "p99")))
    return table


def print_bench(console: Console, result: Any, url: str) -> None:
    """What `tuner bench` prints."""
    windows = ", ".join(f"{v:.1f}" for v in result.window_tok_s)
    console.print(f"[bold]tok/s@C{result.concurrency}: {result.tok_s:.2f}[/bold]  (windows: {windows}; "
                  f"spread {result.spread:.1%})")
    held = "held" if result.held_concurrency else "[red]NOT held[/red]"
    console.print(f"achieved concurrency {result.achieved_concurrency:.2f} ({held}); "
                  f"{result.completed} requests completed, {result.failed} failed; "
                  f"{result.request_throughput:.2f} req/s; per-user {result.per_user_tok_s:.2f} tok/s")
    if result.accept_length:
        console.print(f"speculative accept length (this run): {result.accept_length:.2f}")
    console.print(bench_table(result, url))
    for err in result.errors:
        console.print(f"  error: {err}", markup=False)
