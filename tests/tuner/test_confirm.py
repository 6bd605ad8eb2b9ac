"""`--confirm N`: the N best by median end up measured twice, even when a second measurement
reorders the leaders. The real sweep loop, store and Optuna study; only the launcher is scripted
(through the launcher seam: every launch is answered with a scripted tok/s)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from core.types import Config
from tests.conftest import FIXTURES
from tests.scripted import scripted_sweep
from tuner.follow_up import CONFIRM_ROUNDS
from tuner.results import SweepResults
from tuner.sweep_state import SweepOptions


def first_value(config: Config) -> float:
    """A distinct first measurement per configuration (the baseline: 1)."""
    p = config.params
    if not p:
        return 1.0
    return (10.0 + {"auto": 0, "triton": 4, "marlin": 2}[p["moe_runner_backend"]] + (p["checkpoint"] == "fast") * 8
            + {16: 0.5, 32: 1.0, 64: 0.0}[p["cuda_graph_max_bs"]] - (p["ep_size"] == 2) * 0.25)


def sweep_with(tmp_path: Path, confirm: int, second: Callable[[int, float], float]) -> tuple[SweepResults, str]:
    """A 12-launch sweep of the e2e space with ``--confirm``; ``second(rank, first)`` scripts the
    confirmation of the configuration ranked ``rank`` (0 = best) after the budget."""
    ranks: dict[str, int] = {}

    def script(config: Config, before: int) -> float:
        if before == 0:
            return first_value(config)
        return second(ranks.setdefault(config.key(), len(ranks)), first_value(config))

    out = io.StringIO()
    opts = SweepOptions(space_path=str(FIXTURES / "e2e-space.yaml"), db_path=str(tmp_path / "t.db"), budget=12,
                        confirm=confirm, seed=0)
    results, _ = scripted_sweep(opts, script, out)
    return results, out.getvalue()


def confirmed_order(results: SweepResults) -> list[float]:
    """First measurements of the confirmed configurations, in the order they were confirmed."""
    first = {r.config_key: r.tok_s for r in results.runs if r.status == "ok" and r.repeat_of is None}
    return [first[r.config_key] or 0.0 for r in results.runs if r.repeat_of is not None]


def test_a_leader_that_drops_brings_the_new_leader_in(tmp_path: Path) -> None:
    results, _ = sweep_with(tmp_path, 1, second=lambda rank, first: first * (0.5 if rank == 0 else 0.99))
    firsts = sorted((r.tok_s or 0 for r in results.measured()), reverse=True)
    order = confirmed_order(results)
    assert order == firsts[:2], "the leader fell to a median below the runner-up, so the runner-up was confirmed"
    best = results.best()
    assert best is not None and len(results.samples(best.config_key)) == 2
    assert results.score(best) == (firsts[1] + firsts[1] * 0.99) / 2


def test_confirmation_rounds_are_bounded(tmp_path: Path) -> None:
    results, log = sweep_with(tmp_path, 1, second=lambda rank, first: 0.1)
    assert len([r for r in results.runs if r.repeat_of is not None]) == CONFIRM_ROUNDS
    assert "the best may rest on one measurement" in log


def test_a_ranking_settled_by_the_last_round_gives_no_warning(tmp_path: Path) -> None:
    results, log = sweep_with(tmp_path, 1, second=lambda rank, first: 0.1 if rank < 2 else first)
    assert len(confirmed_order(results)) == 3
    best = results.best()
    assert best is not None and len(results.samples(best.config_key)) == 2
    assert "still moves" not in log
