"""What the user sees during a sweep: a rich live view on a terminal, plain log lines otherwise."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from core.types import RunStatus
from db.store import RunRow


def value_text(value: Any) -> str:
    """A setting's value as shown: floats keep six significant digits (0.001, not 0.0), others as str."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def config_summary(params: dict[str, Any], limit: int | None = None) -> str:
    """Sampled params as ``name=value`` (last name segment); with ``limit``, whole settings only that
    fit, then ``+N more`` (a setting is never cut in the middle)."""
    if not params:
        return "baseline (base settings only)"
    items = [f"{k.rsplit('.', 1)[-1]}={value_text(v)}" for k, v in params.items()]
    if limit is None or len(" ".join(items)) <= limit:
        return " ".join(items)
    shown: list[str] = []
    for i, item in enumerate(items):
        more = f" +{len(items) - i} more"
        if len(" ".join([*shown, item])) + len(more) > limit and shown:
            return " ".join(shown) + more
        shown.append(item)
    return " ".join(shown)


@dataclass
class GroupView:
    """One GPU group's row."""

    label: str
    trial: int | None = None
    summary: str = ""
    phase: str = "idle"
    since: float = field(default_factory=time.time)


class SweepView:
    """Live table of groups, recent trials, best so far and ETA; or log lines when not a TTY."""

    def __init__(self, console: Console, study: str, budget: int, time_scale: float = 1.0) -> None:
        self.console = console
        self.study = study
        self.budget = budget
        self.time_scale = time_scale
        self.groups: list[GroupView] = []
        self.recent: list[RunRow] = []
        self.best: RunRow | None = None
        self.baseline: RunRow | None = None
        self.done = 0
        self.durations: list[float] = []
        self._live: Live | None = None

    def __enter__(self) -> SweepView:
        if self.console.is_terminal:
            self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=4,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def log(self, message: str) -> None:
        """A line above the live view (or on its own when not a terminal)."""
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def set_phase(self, index: int, trial: int | None, phase: str, since: float) -> None:
        """Update one group's phase (from the actor's status)."""
        g = self.groups[index]
        if (g.trial, g.phase) != (trial, phase) and self._live is None and trial is not None:
            self.log(f"[group {index}] trial {trial}: {phase}")
        g.trial, g.phase, g.since = trial, phase, since

    def started(self, index: int, trial: int, params: dict[str, Any], joined: Sequence[int] = ()) -> None:
        """A trial was sent to a group (with the ``joined`` groups' GPUs too)."""
        g = self.groups[index]
        g.trial, g.summary, g.phase, g.since = trial, config_summary(params), "launching", time.time()
        for other in joined:
            self.groups[other].trial, self.groups[other].summary = trial, f"(GPUs of trial {trial}, group {index})"
            self.groups[other].phase, self.groups[other].since = "lent", g.since
        if self._live is None:
            also = f" (+ group{'s' if len(joined) > 1 else ''} {','.join(map(str, joined))})" if joined else ""
            self.log(f"[group {index}]{also} trial {trial} started: {g.summary}")

    def _fmt(self, run: RunRow) -> str:
        if run.status in (RunStatus.OK, RunStatus.CACHED) and run.tok_s is not None:
            extra = f" (modelled {run.tok_s / self.time_scale:.2f})" if self.time_scale != 1 else ""
            if (run.metrics or {}).get("early_stopped"):
                extra += " early-stopped"
            if run.status == RunStatus.CACHED:
                extra += f", from trial {run.cached_from} (not launched)"
            return f"{run.tok_s:.1f} tok/s@C16{extra}"
        if run.status == RunStatus.CACHED:
            return f"infeasible, from trial {run.cached_from} (not launched): {run.failure_kind or ''} " \
                   f"{run.failure_reason}"
        return f"{run.status}: {run.failure_kind or ''} {run.failure_reason}"

    def _counter(self, run: RunRow, launched: int) -> str:
        """``[n/budget]`` for a launch the budget counts (each n once); what else a line is, otherwise."""
        if run.status in (RunStatus.CACHED, RunStatus.AVOIDED):
            return "[no launch]"
        if run.repeat_of is not None and not run.remeasure:
            return "[profile]" if run.profile else "[other concurrencies]" if run.curve else "[confirmation]"
        if run.status not in (RunStatus.OK, RunStatus.INFEASIBLE):
            return "[not counted]"
        return f"[{launched}/{self.budget}]"

    def finished(self, run: RunRow, duration_s: float | None, launched: int) -> None:
        """A trial finished (or was answered from the store)."""
        self.done = launched
        if duration_s is not None and run.status in (RunStatus.OK, RunStatus.INFEASIBLE):
            self.durations.append(duration_s)
        self.recent = [run, *self.recent][:8]
        if run.baseline and run.status == RunStatus.OK:
            self.baseline = run
        if run.tok_s is not None and run.status == RunStatus.OK and (
                self.best is None or run.tok_s > (self.best.tok_s or 0)):
            self.best = run
        doing = "re-measuring" if run.remeasure else "profiling" if run.profile else \
            "measuring at " + ", ".join(f"C{b['concurrency']}" for b in run.curve) if run.curve else "confirming"
        again = f" ({doing} #{run.repeat_of})" if run.repeat_of is not None else ""
        self.log(f"trial {run.trial_number} {self._counter(run, launched)} {config_summary(run.params)} -> "
                 f"{self._fmt(run)}{again}")

    def eta_s(self) -> float | None:
        """Remaining seconds, from the mean trial duration and the number of groups."""
        if not self.durations or not self.groups:
            return None
        remaining = max(self.budget - self.done, 0)
        return sum(self.durations) / len(self.durations) * remaining / len(self.groups)

    def render(self) -> Group:
        """The live view."""
        table = Table(title=f"sweep {self.study}: {self.done}/{self.budget} launched", title_justify="left")
        for col in ("group", "trial", "config", "phase", "elapsed"):
            table.add_column(col)
        now = time.time()
        for g in self.groups:
            table.add_row(g.label, "-" if g.trial is None else str(g.trial), g.summary if g.trial is not None
                          else "", g.phase, f"{now - g.since:.0f}s" if g.trial is not None else "")
        recent = Table(show_header=True, title="recent trials", title_justify="left")
        recent.add_column("trial")
        recent.add_column("result")
        recent.add_column("config")
        for run in self.recent:
            recent.add_row(str(run.trial_number), self._fmt(run), config_summary(run.params))  # rich wraps
        eta = self.eta_s()
        best = (f"best: trial {self.best.trial_number} {self._fmt(self.best)}" if self.best else "best: -")
        footer = f"{best}   ETA: {'-' if eta is None else f'{eta / 60:.1f} min'}"
        return Group(table, recent, footer)
