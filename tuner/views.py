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
