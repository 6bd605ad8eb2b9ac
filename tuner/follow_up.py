"""What a sweep does after its budget: confirm the leaders (``--confirm N``) and profile the best
(``--profile-best``). Both queue launches of configurations already measured and run them through the
sweep's own loop, which counts them apart from the budget (``Quota.confirmations``)."""

from __future__ import annotations

from collections.abc import Callable

from core.types import RunStatus
from db.store import Store
from tuner.results import SweepResults
from tuner.sweep_state import Context, Quota

CONFIRM_ROUNDS = 3  # --confirm: a confirmation that reorders the leaders brings the new ones in, this often
PROFILE_STEPS = 20  # --profile-best: decode steps recorded under the profiler (as the seed campaign did)
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
