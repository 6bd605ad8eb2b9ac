"""Several drivers on one study: what one driver does for the others (see :mod:`db.coordination`).

A driver answers the proposals that waited for a configuration another driver was launching, once
that one is recorded, and fails and re-queues the trials a dead driver left RUNNING.
"""

from __future__ import annotations

from datetime import datetime

from optuna.trial import TrialState

from core.types import RunStatus
from db.store import Store
from tuner.recording import Recorder
from tuner.sweep_state import Context, Flight, carried_attrs

DRIVER_ATTR = "driver"  # a trial's system attribute: the driver that asked for it
JUST_ASKED_S = 60  # a RUNNING trial of no known driver this young may be another's, before it says so


def recover(ctx: Context, store: Store) -> None:
    """Fail and re-queue the trials a dead driver left RUNNING (those of live drivers run on)."""
    study = ctx.study
    # The trials before the drivers: a driver registers before it asks, so the owner of every trial
    # read here is in the live set read after it (read the other way round, a driver that registered
    # and asked in between would look dead).
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    live = ctx.coord.forget_the_dead()  # this driver included: its trials run on
    others = len(live) > 1
    for t in running:
        owner = t.system_attrs.get(DRIVER_ATTR)
        just_asked = t.datetime_start is not None and (
            datetime.now() - t.datetime_start).total_seconds() < JUST_ASKED_S
        if owner in live or (owner is None and others and just_asked):
            continue
        study._storage.set_trial_user_attr(t._trial_id, "status", RunStatus.INTERRUPTED.value)
        study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
        if store.run(ctx.sweep.id, t.number) is None:
            study.enqueue_trial(t.params, user_attrs={**carried_attrs(t.user_attrs), "retry_of": t.number})


def share(ctx: Context, flight: Flight, store: Store, recorder: Recorder) -> None:
    """Answer the proposals that waited for other drivers' launches, keep this driver's heartbeat,
    and take over what dead drivers left."""
    for key in list(flight.elsewhere):
        prior = store.measured(ctx.sweep.id, key)
        if prior is None and ctx.coord.claimed(key):
            continue
        for trial, config in flight.elsewhere.pop(key):
            if prior is None:  # interrupted there; its driver re-queued it
                ctx.study.tell(trial, state=TrialState.FAIL)
                continue
            run = recorder.answer_from_store(ctx.study, trial, config, prior)
            ctx.view.finished(run, None, store.count_launched(ctx.sweep.id))
    if ctx.coord.beat():
        recover(ctx, store)
