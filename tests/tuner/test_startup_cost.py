"""What each setting costs to start: an additive fit over the launches, so a setting that always came
with a costly one is not charged for it."""

from __future__ import annotations

import itertools
import random

from core.types import RunStatus
from db.store import RunRow
from tuner.startup_cost import startup_costs


def _launch(n: int, params: dict[str, object], startup_s: float | None, status: str = "ok") -> RunRow:
    return RunRow(id=n, trial_number=n, config_key=str(n), baseline=False, params=params, flags={}, argv=["x"],
                  env={}, status=RunStatus(status), failure_kind=None, failure_reason="", log_tail="",
                  tok_s=1.0, metrics=None, gate=None, startup_s=startup_s, sglang_version="0.5.23", node="h",
                  gpu_ids=["0"], started_at=None, finished_at=None, cached_from=None)


def test_each_setting_is_charged_its_own_startup_seconds() -> None:
    rng = random.Random(5)
    # a2a=deepep costs 60 s, runner=marlin 75 s, graph size nothing; deepep launches are mostly marlin ones
    grid = list(itertools.product(["none", "deepep"], ["auto", "marlin"], [16, 64]))
    runs = []
    for n, (a2a, runner, graphs) in enumerate(grid * 3):
        if a2a == "deepep" and runner == "auto" and n % 3:
            continue  # confounded on purpose: a plain per-value average would charge deepep for marlin
        cost = 100 + 60 * (a2a == "deepep") + 75 * (runner == "marlin") + rng.uniform(-2, 2)
        runs.append(_launch(n, {"a2a": a2a, "runner": runner, "graphs": graphs}, cost))
    costs = {(c.name, c.value): c for c in startup_costs(runs)}
    deepep = costs.get(("a2a", "deepep")) or costs[("a2a", "none")]
    marlin = costs.get(("runner", "marlin")) or costs[("runner", "auto")]
    assert abs(abs(deepep.seconds) - 60) < 6 and abs(abs(marlin.seconds) - 75) < 6
    graphs = next(c for c in costs.values() if c.name == "graphs")
    assert abs(graphs.seconds) < 4
    assert max(costs.values(), key=lambda c: abs(c.seconds)).name == "runner"


def test_failed_to_start_answered_and_baseline_runs_do_not_count() -> None:
    runs = [_launch(0, {}, 94.0),  # the baseline: base settings, and the cold first start (as on an H200)
            _launch(1, {"a": 1}, 10.0), _launch(2, {"a": 2}, None, "infeasible"), _launch(3, {"a": 2}, 30.0)]
    assert startup_costs(runs) == []  # two startups measured: too few to fit
    runs.append(_launch(4, {"a": 1}, 12.0))
    (cost,) = startup_costs(runs)
    assert (cost.value, cost.reference, cost.launches) == (2, 1, 1) and 15 < cost.seconds < 19  # 30 vs 10-12 s
