"""The trade-off a single "best" hides: aggregate tok/s@C16 against TTFT p99 (what one user waits for
the first token when 16 share the server). The Pareto front is every measured configuration that no
other beats on both; ``pick`` chooses a point by a stated rule, the same objectives ``--slo`` takes
(``export --pick "ttft_p99<=200ms"``): the fastest configuration that meets all of them."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import StudyError
from core.slo import parse_slos
from db.store import RunRow
from tuner.results import SweepResults

LATENCY_AXIS = "ttft_p99"


@dataclass(frozen=True)
class Point:
    """One measured configuration on the trade-off: its median tok/s@C16, TTFT p99 and per-user tok/s."""

    run: RunRow
    tok_s: float
    ttft_p99_ms: float
    per_user_tok_s: float


def points(results: SweepResults) -> list[Point]:
    """Every measured configuration with a TTFT p99 and its median tok/s@C16 of one server."""
    out = []
    for run in results.measured():
        metrics = run.metrics or {}
        ttft = (metrics.get("ttft_ms") or {}).get("p99")
        if isinstance(ttft, int | float):
            out.append(Point(run, results.median(run), float(ttft), float(metrics.get("per_user_tok_s") or 0.0)))
    return out


def front(results: SweepResults) -> list[Point]:
    """The Pareto front (highest tok/s@C16, lowest TTFT p99), fastest first; configurations that read
    exactly alike on both (none beats the other) are all on it."""
    out: list[Point] = []
    for p in sorted(points(results), key=lambda q: (-q.tok_s, q.ttft_p99_ms)):
        if not out or p.ttft_p99_ms < out[-1].ttft_p99_ms or (p.tok_s, p.ttft_p99_ms) == (out[-1].tok_s,
                                                                                          out[-1].ttft_p99_ms):
            out.append(p)
    return out


def front_lines(results: SweepResults) -> list[str]:
    """The front as one line per point (the dashboard's study attribute ``pareto_front``)."""
    return [f"trial {p.run.trial_number}: {p.tok_s:.1f} tok/s@C16, TTFT p99 {p.ttft_p99_ms:.4g} ms, "
            f"{p.per_user_tok_s:.1f} tok/s per user" for p in front(results)]


def pick(results: SweepResults, rule: str) -> RunRow:
    """The fastest measured configuration that meets every objective of ``rule``; StudyError naming the
    closest miss when none does."""
    slos = parse_slos(rule, where="--pick")
    measured = results.measured()
    for run in measured:
        if all(s.holds(s.value_in(run.metrics or {})) for s in slos):
            return run
    if not measured:
        raise StudyError(f"study {results.sweep.study_name!r} has no measured configuration yet")
    closest = []
    for s in slos:
        values = [(v, r.trial_number) for r in measured if (v := s.value_in(r.metrics or {})) == v]
        if values:
            v, n = (min if s.is_ceiling else max)(values)
            closest.append(f"{'lowest' if s.is_ceiling else 'highest'} {s.metric} {v:.4g} (trial {n})")
    raise StudyError(f"--pick {rule!r}: no measured configuration meets it ({'; '.join(closest) or 'not measured'});"
                     " `tuner show` lists the trade-off")
