"""What a sweep does after its budget: confirm the leaders (``--confirm N``), measure the trade-off at
other concurrencies (``--front-at 1,4,64``) and profile the best (``--profile-best``). Each queues
launches of configurations already measured and runs them through the sweep's own loop, which counts
them apart from the budget (``Quota.confirmations``)."""

from __future__ import annotations

from collections.abc import Callable

from core.errors import ConfigError
from core.types import RunStatus
from db.store import Store
from tuner.pareto import front
from tuner.results import SweepResults
from tuner.sweep_state import Context, Quota

CONFIRM_ROUNDS = 3  # --confirm: a confirmation that reorders the leaders brings the new ones in, this often
PROFILE_STEPS = 20  # --profile-best: decode steps recorded under the profiler (as the seed campaign did)
FRONT_POINTS = 4  # --front-at: the fastest configurations of the trade-off measured at other concurrencies
MAX_CONCURRENCY = 1024
Loop = Callable[[Context, Quota], None]


def confirm_leaders(ctx: Context, store: Store, loop: Loop, budget: int, count: int) -> None:
    """Measure the ``count`` best configurations once more, until the ``count`` best by median have all
    been measured twice (a confirmation that drops its configuration down the ranking brings the new
    leader in), at most ``CONFIRM_ROUNDS`` rounds."""
    for done_rounds in range(CONFIRM_ROUNDS + 1):
        results = SweepResults(ctx.sweep, store.runs(ctx.sweep.id))
        leaders = [r for r in results.ranked()[:count]
                   if r.status == RunStatus.OK and len(results.samples(r.config_key)) < 2]
        if not leaders:
            return
        if done_rounds == CONFIRM_ROUNDS:
            ctx.view.log(f"after {CONFIRM_ROUNDS} confirmation rounds the ranking still moves; "
                         "the best may rest on one measurement")
            return
        ctx.view.log(f"confirming {len(leaders)} of the {count} best configuration(s) with a second measurement")
        for run in leaders:
            ctx.study.enqueue_trial(run.params, user_attrs={"repeat_of": run.trial_number, "baseline": run.baseline})
        loop(ctx, Quota(budget, confirmations=len(leaders)))


def measure_front(ctx: Context, store: Store, loop: Loop, budget: int, concurrencies: tuple[int, ...]) -> None:
    """One more launch of each configuration on the trade-off front (the ``FRONT_POINTS`` fastest): the
    benchmark again, then at each of ``concurrencies`` (the curve `show` and the report draw)."""
    points = front(SweepResults(ctx.sweep, store.runs(ctx.sweep.id)))[:FRONT_POINTS]
    if not points:
        ctx.view.log("--front-at: no configuration was measured; nothing to measure")
        return
    at = ", ".join(f"C{c}" for c in concurrencies)
    ctx.view.log(f"measuring the {len(points)} configuration(s) of the trade-off at {at}")
    for p in points:
        ctx.study.enqueue_trial(p.run.params, user_attrs={"repeat_of": p.run.trial_number, "baseline": p.run.baseline,
                                                         "curve": list(concurrencies)})
    loop(ctx, Quota(budget, confirmations=len(points)))


def parse_concurrencies(text: str) -> tuple[int, ...]:
    """``"1,4,64"`` -> (1, 4, 64); ConfigError naming ``--front-at`` for anything else."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or any(v < 1 or v > MAX_CONCURRENCY for v in values):
        raise ConfigError(f"--front-at {text!r}: expected concurrencies 1-{MAX_CONCURRENCY} separated by commas, "
                          "e.g. 1,4,64")
    return tuple(dict.fromkeys(values))


def profile_best(ctx: Context, store: Store, loop: Loop, budget: int) -> None:
    """One more launch of the best configuration: the benchmark again (a further reading of it), then
    ``PROFILE_STEPS`` decode steps under SGLang's profiler, whose top kernels are recorded with it."""
    best = SweepResults(ctx.sweep, store.runs(ctx.sweep.id)).best()
    if best is None:
        ctx.view.log("--profile-best: no configuration was measured; nothing to profile")
        return
    ctx.view.log(f"profiling the best configuration (trial {best.trial_number}): {PROFILE_STEPS} decode steps "
                 "under SGLang's profiler")
    ctx.study.enqueue_trial(best.params, user_attrs={"repeat_of": best.trial_number, "baseline": best.baseline,
                                                    "profile": True})
    loop(ctx, Quota(budget, confirmations=1))
