"""What each setting costs to try: the measured server startup (load, compile, CUDA-graph capture) per
setting, from the sweep's own launches.

The baseline is left out: its settings are the base ones, not values of the parameters, and as the
sweep's first launch it often pays for cold caches (on an H200: 94 s against 39-41 s for the others).
Startups differ by many settings at once, so a plain average per value would charge one setting for
another's cost (DeepEP's launches are also the EP-8 ones). Instead the startup seconds of every launch
that reached readiness are fitted as an additive model, ``startup = base + sum of per-setting costs``,
by ridge-regularised least squares (a value seen in few launches stays near zero), each cost relative
to the parameter's most launched value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from db.store import RunRow

RIDGE = 0.1  # in launches: a value seen in one launch keeps about 90% of its apparent cost


@dataclass(frozen=True)
class SettingCost:
    """Extra seconds of startup ``name=value`` costs over ``reference`` (the parameter's most launched
    value), estimated from ``launches`` launches that had it."""

    name: str
    value: object
    reference: object
    seconds: float
    launches: int


def startup_costs(runs: list[RunRow]) -> list[SettingCost]:
    """Per-setting startup costs, largest magnitude first (empty with fewer than three startups)."""
    started = [r for r in runs if r.startup_s is not None and r.status.launched and r.cached_from is None
               and r.params]  # the baseline's settings are not parameters (and it is often the cold first start)
    if len(started) < 3:
        return []
    counts: dict[tuple[str, str], int] = {}
    values: dict[tuple[str, str], object] = {}
    for r in started:
        for n, v in r.params.items():
            counts[(n, repr(v))] = counts.get((n, repr(v)), 0) + 1
            values[(n, repr(v))] = v
    reference: dict[str, str] = {}
    for (n, v), _count in sorted(counts.items(), key=lambda kv: -kv[1]):
        reference.setdefault(n, v)
    columns = sorted(k for k in counts if reference[k[0]] != k[1])
    x = np.zeros((len(started), len(columns) + 1))
    x[:, 0] = 1.0  # the intercept: a launch with every parameter at its reference value
    for i, r in enumerate(started):
        for j, (n, v) in enumerate(columns):
            x[i, j + 1] = float(n in r.params and repr(r.params[n]) == v)
    y = np.array([float(r.startup_s or 0.0) for r in started])
    penalty = RIDGE * np.eye(len(columns) + 1)
    penalty[0, 0] = 0.0
    coef = np.linalg.solve(x.T @ x + penalty, x.T @ y)
    out = [SettingCost(n, values[(n, v)], values[(n, reference[n])], float(c), int(x[:, j + 1].sum()))
           for j, ((n, v), c) in enumerate(zip(columns, coef[1:], strict=True))]
    return sorted(out, key=lambda c: -abs(c.seconds))
