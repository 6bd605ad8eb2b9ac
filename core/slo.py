"""Service-level objectives a configuration must meet to count: ``ttft_p99<2s,itl_p99<50ms,per_user_tok_s>30``.

Given by ``--slo`` or the space's ``slo:``. A measured trial that misses one is infeasible
(``slo_missed``) with the reason naming the objective and the measured value, so the best is the
fastest configuration that meets all of them. Latency metrics are ``ttft``, ``itl``, ``tpot`` and
``e2e`` with ``_p50``, ``_p90`` or ``_p99`` (values in ``ms`` or ``s``; a bare number is ms);
rates are ``per_user_tok_s`` and ``tok_s``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from core.types import BenchResult, FailureKind, TrialResult

LATENCIES = ("ttft", "itl", "tpot", "e2e")
PERCENTILES = ("p50", "p90", "p99")
RATES = ("per_user_tok_s", "tok_s")
_ONE = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z/]*)\s*$")


@dataclass(frozen=True)
class Slo:
    """``metric`` ``op`` ``limit`` (latencies in ms)."""

    metric: str
    op: str
    limit: float

    def __str__(self) -> str:
        unit = " ms" if self.metric.split("_")[0] in LATENCIES else ""
        return f"{self.metric} {self.op} {self.limit:g}{unit}"

    @property
    def is_ceiling(self) -> bool:
        """The metric must stay below the limit (a latency); else above it (a rate)."""
        return "<" in self.op

    def value(self, bench: BenchResult) -> float:
        """The measured value this objective is about."""
        return self.value_in(bench.as_dict())

    def value_in(self, metrics: Mapping[str, Any]) -> float:
        """The same value read from a stored measurement (``BenchResult.as_dict``); NaN when absent."""
        if self.metric in RATES:
            found = metrics.get(self.metric)
        else:
            name, pct = self.metric.rsplit("_", 1)
            found = (metrics.get(f"{name}_ms") or {}).get(pct)
        return float(found) if isinstance(found, int | float) else float("nan")

    def holds(self, value: float) -> bool:
        """Does a measured value meet the objective (NaN, not measured, does not)?"""
        if value != value:
            return False
        return {"<": value < self.limit, "<=": value <= self.limit, ">": value > self.limit,
                ">=": value >= self.limit}[self.op]

    def met(self, bench: BenchResult) -> bool:
        """Does the measurement meet it (a missing value does not)?"""
        return self.holds(self.value(bench))


def parse_slos(text: str | None, where: str = "--slo") -> tuple[Slo, ...]:
    """The objectives in a comma-separated text; ConfigError in one line naming the bad part."""
    if not text or not text.strip():
        return ()
    out = []
    for part in text.split(","):
        m = _ONE.match(part.lower())
        if not m:
            raise ConfigError(f"{where}: {part.strip()!r} is not METRIC<VALUE or METRIC>VALUE "
                              "(e.g. ttft_p99<2s, itl_p99<50ms, per_user_tok_s>30)")
        metric, op, number, unit = m.groups()
        out.append(Slo(metric, op, _limit(metric, float(number), unit, where, part.strip())))
    return tuple(out)


def _limit(metric: str, number: float, unit: str, where: str, part: str) -> float:
    name, _, pct = metric.rpartition("_")
    if name in LATENCIES and pct in PERCENTILES:
        if unit not in ("", "ms", "s"):
            raise ConfigError(f"{where}: {part!r}: a latency is in ms or s, not {unit!r}")
        return number * 1000.0 if unit == "s" else number
    if metric in RATES:
        if unit not in ("", "tok/s"):
            raise ConfigError(f"{where}: {part!r}: {metric} is in tok/s, not {unit!r}")
        return number
    known = [f"{n}_{p}" for n in LATENCIES for p in PERCENTILES] + list(RATES)
    raise ConfigError(f"{where}: {part!r}: unknown metric {metric!r} (one of {', '.join(known)})")


def missed(slos: tuple[Slo, ...], bench: BenchResult) -> str | None:
    """Why the measurement misses the objectives (each missed one with its value), or None."""
    misses = [f"{s.metric} {s.value(bench):.4g}{' ms' if s.metric.split('_')[0] in LATENCIES else ''} "
              f"(objective {s})" for s in slos if not s.met(bench)]
    return "missed SLO: " + "; ".join(misses) if misses else None


def judged(result: TrialResult, slos: tuple[Slo, ...]) -> TrialResult:
    """``result``, made infeasible (``slo_missed``, the reason naming each miss) when its measurement
    misses an objective; unchanged otherwise."""
    why = missed(slos, result.bench) if slos and result.ok and result.bench is not None else None
    if why is None:
        return result
    return dataclasses.replace(result, failure_kind=FailureKind.SLO_MISSED, failure_reason=why)
