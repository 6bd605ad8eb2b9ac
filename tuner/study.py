"""The sweep: an Optuna study (ask/tell, one writer) driving a launcher (:mod:`tuner.launchers`).

Loop: while fewer than ``budget`` configurations have been launched, give every idle slot a trial
(:meth:`Sweep._propose`: ask -> sample -> answered without a launch if the space forbids it, a
learned failure rule covers it, or the store already measured it) and collect results as they come
(:meth:`Sweep._complete`; recorded by :mod:`tuner.recording`, then the failure rules are derived
again). Infrastructure failures are re-queued once. Several drivers may work on one study: each
launch is claimed first (:mod:`db.coordination`: the budget counts every driver's launches, a
configuration another driver is launching is answered when it ends), and the RUNNING trials of a
dead driver are failed and re-queued (:mod:`tuner.drivers`). The first trial is the baseline. With
``confirm``, the best configurations are then measured once more and ranked by their median. The
same loop runs real servers through Ray and, with ``--offline``, the scenario's model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState
from threadpoolctl import threadpool_limits

from core.errors import ClusterError
from core.redact import scrub, secret_values
from core.slo import Slo, judged, parse_slos
from core.types import Config, FailureKind, RunStatus, TrialResult, TrialSpec
from db.coordination import Claim, Coordination
from db.location import check as check_database
from db.location import database
from db.store import Store, SweepRow
from tuner.drivers import DRIVER_ATTR, recover, share
from tuner.follow_up import PROFILE_STEPS, confirm_leaders, measure_front, profile_best
from tuner.gpu_pool import GpuPool
from tuner.launchers import launcher_for
from tuner.launchers.base import Finished, Launcher, Slot
from tuner.live import GroupView, SweepView
from tuner.parallelism import gpu_sizes
from tuner.pareto import front_lines
from tuner.recording import INFEASIBLE_VALUE, Recorder, artifact_store
from tuner.results import SweepResults
from tuner.rule_book import RuleBook
from tuner.sampler import check_strategy, make_sampler
from tuner.space import ForbiddenConfig, SearchSpace
from tuner.space_loader import apply_hardware, check_flags, load_space
from tuner.study_db import check_resumable, distinct_configurations, open_study
from tuner.sweep_control import LOOP_POLLS, STOP, SweepInterrupted
from tuner.sweep_state import (
    Context,
    Flight,
    Pending,
    Quota,
    SweepOptions,
    carried_attrs,
    fixed_params,
    interrupted_result,
)
from tuner.watchdog import start_watchdog, stop_watchdog
from workers.node import NodeInfo

MAX_CONSECUTIVE_REPEATS = 100
MAX_CONSECUTIVE_INFRA_FAILURES = 4  # per group: then the nodes, not the configurations, are broken
WAIT_S = 0.5  # how long one wait for results blocks before the live view is refreshed
# The driver's linear algebra (the model's matrices: at most a few hundred rows) runs on one thread. A
# second BLAS thread bought nothing on 2 cores and, beside a benchmark client or another sweep, fought
# them: two offline sweeps at once took 16.7 s with two threads each, 12.7 s with one (same proposals).
DRIVER_BLAS_THREADS = 1


LauncherFactory = Callable[[SearchSpace, SweepOptions], Launcher]


class Sweep:
    """One `tuner sweep` run (see module docstring)."""

    store: Store
    recorder: Recorder
    _infra_failures = 0
    slos: tuple[Slo, ...] = ()

    def __init__(self, options: SweepOptions, view_factory: Callable[[str, int, float], SweepView],
                 launcher_factory: LauncherFactory = launcher_for) -> None:
        self.opts = options
        self.view_factory = view_factory
        self.launcher_factory = launcher_factory

    # ---- setup ------------------------------------------------------------------------------
    def run(self) -> SweepRow:
        """Run to the budget; returns the sweep. Raises SweepInterrupted on Ctrl-C."""
        STOP.clear()
        check_strategy(self.opts.sampler)
        space = load_space(self.opts.space_path)  # a bad file stops here: nothing written, nothing started
        self.slos = parse_slos(self.opts.slo or space.file.slo,
                               "--slo" if self.opts.slo else f"{self.opts.space_path}: slo")
        launcher = self.launcher_factory(space, self.opts)  # so does a bad scenario
        check_database(database(self.opts.db_path), writing=True)  # and an unusable database
        watchdog = start_watchdog() if launcher.starts_processes else None
        try:
            with threadpool_limits(limits=DRIVER_BLAS_THREADS, user_api="blas"):
                return self._drive(space, launcher)
        finally:
            launcher.close()
            if hasattr(self, "store"):
                self.store.close()
            if watchdog is not None:
                stop_watchdog(watchdog)

    def _drive(self, space: SearchSpace, launcher: Launcher) -> SweepRow:
        """Start the launcher's slots, then run the loop (and the follow-ups asked for) to the budget."""
        node, slots = launcher.start()
        check_flags(space, node.table)
        arch = space.file.gpu or (node.gpu.arch if node.gpu else None)
        ctx = self._context(apply_hardware(space, arch, node.sglang_version), launcher, node, slots, arch)
        try:
            with ctx.view:
                self._announce(ctx)
                recover(ctx, self.store)
                self._loop(ctx, Quota(self.opts.budget))
                if self.opts.confirm:
                    confirm_leaders(ctx, self.store, self._loop, self.opts.budget, self.opts.confirm)
                if self.opts.front_at:
                    measure_front(ctx, self.store, self._loop, self.opts.budget, self.opts.front_at)
                if self.opts.profile_best:
                    profile_best(ctx, self.store, self._loop, self.opts.budget)
        finally:
            ctx.coord.leave()
        return ctx.sweep

    def _context(self, space: SearchSpace, launcher: Launcher, node: NodeInfo, slots: list[Slot],
                 arch: str | None) -> Context:
        """Open the store and the study, and derive the failure rules already recorded."""
        self.store = Store(self.opts.db_path)
        name = self.opts.study_name or space.name
        gpu = node.gpu
        sweep = self.store.ensure_sweep(
            name, space_path=str(Path(self.opts.space_path).resolve()),
            space_text=scrub(space.text, secret_values((), space.base.env, space.base.flags)),
            engine=launcher.engine.kind, sglang_version=node.sglang_version,
            gpu_name=gpu.name if gpu else "unknown", gpu_arch=arch, gpu_count=space.file.gpus_per_trial,
            driver=gpu.driver if gpu else "unknown", hosts=sorted({s.host for s in slots}),
            budget=self.opts.budget, roofline_tok_s=space.file.roofline.tok_s if space.file.roofline else None,
            time_scale=node.time_scale, objective=space.file.objective.value)
        rules = RuleBook(space)
        sampler = make_sampler(space, rules, self.opts.seed, self.opts.sampler, self.slos, self.opts.budget)
        study = open_study(self.opts.db_path, name, sampler)
        check_resumable(study, space, self.opts.db_path)
        self.recorder = Recorder(self.store, sweep, artifact_store(self.opts.db_path))
        rules.relearn(self.store.runs(sweep.id))
        view = self.view_factory(name, self.opts.budget, node.time_scale)
        view.groups = [GroupView(s.label) for s in slots]
        coord = Coordination(self.store.engine, sweep.id, str(self.store.db))
        coord.register()
        distinct = distinct_configurations(space, enough=self.opts.budget)
        return Context(study, sweep, space, launcher, node, slots, view, rules, distinct, coord,
                       tuple(gpu_sizes(space)))

    def _announce(self, ctx: Context) -> None:
        view, node = ctx.view, ctx.node
        sizes = "/".join(map(str, ctx.gpu_sizes))
        view.log(f"study {ctx.sweep.study_name}: {len(ctx.slots)} group(s) of {ctx.slot_gpus} GPU(s)"
                 + (f" (a trial takes {sizes} GPUs as its settings need, one node's groups; objective "
                    f"{ctx.space.file.objective})" if ctx.mixed else "")
                 + f", SGLang {node.sglang_version} ({node.table.source}), GPU {ctx.sweep.gpu_arch or 'unknown'}"
                 + (", offline (the scenario's model, no servers)" if self.opts.offline else ""))
        for s in ctx.slots:
            view.log(f"group {s.index}: {s.host} ({s.detail}), GPUs {','.join(s.gpu_ids)}")
        for p in ctx.space.pruned:
            view.log(f"pruned {p.reason}")
        for text, _ in ctx.rules.records():  # failure rules, then settings SGLang runs otherwise
            view.log(f"learned before: {text}")
        done = self.store.count_launched(ctx.sweep.id)
        if done >= self.opts.budget:
            view.log(f"study {ctx.sweep.study_name} already has {done} finished trials (--budget "
                     f"{self.opts.budget}): nothing to launch; raise --budget to run more")

    # ---- the loop ---------------------------------------------------------------------------
    def _loop(self, ctx: Context, quota: Quota) -> None:
        """Launch until the quota is spent (or the space exhausted), collecting results as they come."""
        flight = Flight(pool=GpuPool(ctx.slots), need_baseline=self._needs_baseline(ctx))
        if ctx.mixed:
            flight.pool.check_fits(max(ctx.gpu_sizes) // ctx.slot_gpus)
        LOOP_POLLS.set()
        try:
            while True:
                if STOP.is_set():
                    raise KeyboardInterrupt
                launched = self._fill(ctx, flight, quota)
                if not flight.pending and not flight.elsewhere:
                    if quota.confirmations is None and launched < quota.budget and not flight.budget_spent:
                        ctx.view.log(f"search space exhausted after {launched} distinct configurations")
                    return
                if flight.pending:
                    for done in ctx.launcher.wait(WAIT_S):
                        self._complete(ctx, flight, done)
                else:  # only waiting for configurations other drivers are launching
                    time.sleep(WAIT_S)
                share(ctx, flight, self.store, self.recorder)
                for index, phase in ctx.launcher.phases().items():
                    ctx.view.set_phase(index, phase.trial_number, phase.phase, phase.since)
        except (KeyboardInterrupt, ClusterError) as exc:
            self._abort(ctx, flight, exc)
        finally:
            LOOP_POLLS.clear()

    def _needs_baseline(self, ctx: Context) -> bool:
        queued = ctx.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        return not any(r.baseline for r in self.store.runs(ctx.sweep.id)) and not any(
            t.user_attrs.get("baseline") for t in queued)

    def _fill(self, ctx: Context, flight: Flight, quota: Quota) -> int:
        """Give idle slots trials while the quota allows (held trials first, as their blocks come free);
        returns the launches counted so far."""
        while True:
            self._place_held(ctx, flight)
            launched = self.store.count_launched(ctx.sweep.id)
            exhausted = quota.confirmations is None and (
                flight.answered_in_a_row >= MAX_CONSECUTIVE_REPEATS or launched >= ctx.distinct)
            if not flight.may_propose() or flight.budget_spent or exhausted or not quota.open(
                    launched + ctx.coord.committed()):  # every driver's launches under way
                return launched
            pending = self._propose(ctx, flight, quota)
            if pending is None:
                continue
            if flight.place(pending, ctx.launcher.now()):
                for held in flight.held:  # a smaller trial went ahead of the held ones
                    held.passed_over += 1
                self._launch(ctx, flight, pending)
            else:
                flight.held.append(pending)
                flight.pending[pending.trial.number] = pending

    def _place_held(self, ctx: Context, flight: Flight) -> None:
        """Launch the held trials whose block of slots is free now, oldest first."""
        for p in list(flight.held):
            if flight.place(p, ctx.launcher.now()):
                flight.held.remove(p)
                self._launch(ctx, flight, p)

    def _propose(self, ctx: Context, flight: Flight, quota: Quota) -> Pending | None:
        """Ask for a trial; None when it was answered without a launch (forbidden, learned, measured)."""
        trial = ctx.study.ask()
        if not ctx.coord.own_trial(trial._trial_id, DRIVER_ATTR):  # another driver popped this queued trial too
            return None
        baseline = bool(trial.user_attrs.get("baseline"))
        repeat_of = trial.user_attrs.get("repeat_of")
        if flight.need_baseline and "retry_of" not in trial.user_attrs and repeat_of is None \
                and not fixed_params(ctx.study, trial):  # a trial queued with its settings stays itself
            trial.set_user_attr("baseline", True)
            baseline, flight.need_baseline = True, False
        try:
            config = ctx.space.baseline() if baseline else ctx.space.sample(trial)
        except ForbiddenConfig as exc:
            trial.set_user_attr("status", "forbidden")
            trial.set_constraint("forbidden", 1.0)
            ctx.study.tell(trial, INFEASIBLE_VALUE)
            ctx.view.log(f"trial {trial.number}: {exc}")
            flight.answered_in_a_row += 1
            return None
        if repeat_of is None and self._answered(ctx, flight, trial, config):
            flight.answered_in_a_row += 1
            return None
        if not self._claim(ctx, flight, quota, trial, config):
            return None
        if repeat_of is not None and quota.confirmations is not None:
            quota.confirmations -= 1
        flight.answered_in_a_row = 0
        return Pending(trial, config, (), baseline, trial.user_attrs.get("retry_of"), repeat_of,
                       bool(trial.user_attrs.get("remeasure")), bool(trial.user_attrs.get("profile")),
                       tuple(trial.user_attrs.get("curve") or ()), slots_needed=ctx.slots_for(config))

    def _answered(self, ctx: Context, flight: Flight, trial: optuna.Trial, config: Config) -> bool:
        """Answer a proposal without a launch when a learned rule covers it, the store measured it, or
        the same configuration is in flight (then it is answered when that one ends)."""
        rule = ctx.rules.blocking(ctx.rules.runs_as.effective_params(config.params, config.flags))
        if rule is not None:
            run = self.recorder.avoid(ctx.study, trial, config, f"learned: {rule.describe(ctx.rules.domains)}",
                                      FailureKind(rule.kind))
            ctx.view.finished(run, None, self.store.count_launched(ctx.sweep.id))
            return True
        key = config.key()
        prior = self.store.measured(ctx.sweep.id, key)
        if prior is None and (alike := ctx.rules.runs_as.runs_as(config)) is not None:
            prior, why = alike
            ctx.view.log(f"trial {trial.number}: SGLang runs it as trial {prior.trial_number} ({why}): not launched")
        if prior is not None:
            run = self.recorder.answer_from_store(ctx.study, trial, config, prior)
            ctx.view.finished(run, None, self.store.count_launched(ctx.sweep.id))
            return True
        if flight.in_flight(key):
            flight.waiting_on.setdefault(key, []).append((trial, config))
            return True
        return False

    def _claim(self, ctx: Context, flight: Flight, quota: Quota, trial: optuna.Trial, config: Config) -> bool:
        """Claim the launch among every driver of the sweep; False when another driver is launching
        this configuration (answered when it ends) or the budget is already committed."""
        repeat_of, remeasure = trial.user_attrs.get("repeat_of"), bool(trial.user_attrs.get("remeasure"))
        claim = ctx.coord.claim(config.key(), trial.number, counted=repeat_of is None or remeasure,
                                budget=quota.budget, first=repeat_of is None)
        if claim is Claim.CLAIMED:
            return True
        if claim in (Claim.TAKEN, Claim.MEASURED) and repeat_of is None:  # answered from the store when done
            flight.elsewhere.setdefault(config.key(), []).append((trial, config))
            flight.answered_in_a_row += 1
            return False
        ctx.study.tell(trial, state=TrialState.FAIL)  # not launched: the budget is spent, or another
        flight.budget_spent = claim is Claim.BUDGET_SPENT  # driver is confirming the same configuration
        return False

    def _launch(self, ctx: Context, flight: Flight, p: Pending) -> None:
        space = ctx.space
        best = None if p.repeat_of is not None else self.store.best_tok_s(ctx.sweep.id)
        spec = TrialSpec(trial_number=p.trial.number, config=p.config, engine=ctx.launcher.engine,
                         bench=space.bench_config(best), gate=space.gate_config(),
                         startup_timeout_s=space.file.startup_timeout_s, log_dir=str(self._log_dir(ctx.sweep)),
                         profile_steps=PROFILE_STEPS if p.profile else 0,
                         gpu_ids=p.gpu_ids if len(p.slots) > 1 else (), more_concurrencies=p.curve)
        ctx.launcher.submit(p.slot.index, spec)
        p.sent_at = time.time()
        flight.pending[p.trial.number] = p
        ctx.view.started(p.slot.index, p.trial.number, p.config.params, joined=[s.index for s in p.slots[1:]])

    def _complete(self, ctx: Context, flight: Flight, done: Finished) -> None:
        """Record a result, free its slot, answer the proposals that waited for its configuration."""
        p = flight.pending.pop(done.result.trial_number)
        flight.free(p, done.result.finished_at - done.result.started_at)
        self._finish(ctx, p, judged(done.result, self.slos))  # outside an objective: infeasible
        key = p.config.key()
        for trial, config in flight.waiting_on.pop(key, []):
            prior = self.store.measured(ctx.sweep.id, key)
            if prior is None:
                ctx.study.tell(trial, state=TrialState.FAIL)
                continue
            run = self.recorder.answer_from_store(ctx.study, trial, config, prior)
            ctx.view.finished(run, None, self.store.count_launched(ctx.sweep.id))

    def _finish(self, ctx: Context, p: Pending, result: TrialResult) -> None:
        run = self.recorder.finish(ctx.study, p.trial, p.config, result, baseline=p.baseline,
                                   repeat_of=p.repeat_of, remeasure=p.remeasure)
        self._infra_failures = self._infra_failures + 1 if run.status == RunStatus.FAILED else 0
        if run.status == RunStatus.INTERRUPTED or (run.status == RunStatus.FAILED and p.retry_of is None):
            ctx.study.enqueue_trial(p.trial.params,
                                    user_attrs={**carried_attrs(p.trial.user_attrs), "retry_of": p.trial.number})
        if run.status == RunStatus.OK and p.repeat_of is None and not p.baseline:
            self._remeasure_if_surprising(ctx, p)
        ctx.view.finished(run, result.finished_at - result.started_at, self.store.count_launched(ctx.sweep.id))
        if run.status in (RunStatus.OK, RunStatus.INFEASIBLE):
            runs = self.store.runs(ctx.sweep.id)
            for text in ctx.rules.relearn(runs):
                ctx.view.log(f"learned: {text}")
            records = ctx.rules.records()
            self.store.replace_rules(ctx.sweep.id, records)
            # shown by the dashboard, on the study's page
            ctx.study.set_user_attr("learned_rules", [text for text, _ in records])
            ctx.study.set_user_attr("pareto_front", front_lines(SweepResults(ctx.sweep, runs)))
        if self._infra_failures >= MAX_CONSECUTIVE_INFRA_FAILURES * max(len(ctx.slots), 1):
            raise ClusterError(f"{self._infra_failures} trials in a row failed for reasons of the nodes, not of "
                               f"their configurations; last: {run.failure_reason}")

    def _remeasure_if_surprising(self, ctx: Context, p: Pending) -> None:
        """Queue one more launch of a configuration whose reading the sampler's model did not expect
        (counted in the budget); samplers without a model never ask for one."""
        surprise = getattr(ctx.study.sampler, "surprise", None)
        if surprise is None:
            return
        expected = surprise(ctx.study.get_trials(deepcopy=False), p.trial.number)
        if expected is not None:
            ctx.view.log(f"trial {p.trial.number} read far below the {expected:.1f} tok/s@C16 the model expected "
                         "of it: measuring it once more")
            ctx.study.enqueue_trial(p.trial.params, user_attrs={"repeat_of": p.trial.number, "remeasure": True})

    def _abort(self, ctx: Context, flight: Flight, exc: BaseException) -> None:
        """Stop every server, record the trials in flight as interrupted, and re-raise."""
        why = "interrupted by the user" if isinstance(exc, KeyboardInterrupt) else "the sweep stopped"
        ctx.view.log(f"{why}: stopping every server ...")
        ctx.launcher.stop_all()
        self._infra_failures = -len(flight.pending)  # these interruptions are not more evidence
        for p in flight.held:  # never launched: nothing to wait for
            self._finish(ctx, flight.pending.pop(p.trial.number), interrupted_result(p, ctx.node, why))
        flight.held.clear()
        deadline = time.monotonic() + 60
        while flight.pending and time.monotonic() < deadline:
            for done in ctx.launcher.wait(min(5.0, max(deadline - time.monotonic(), 0.1))):
                p = flight.pending.pop(done.result.trial_number)
                result = done.result
                if result.failure_kind is None:
                    result = interrupted_result(p, ctx.node, why)
                self._finish(ctx, p, result)
        for p in list(flight.pending.values()):
            self._finish(ctx, p, interrupted_result(p, ctx.node, why))
        flight.pending.clear()
        for waiting in flight.elsewhere.values():
            for trial, _ in waiting:
                ctx.study.tell(trial, state=TrialState.FAIL)
        flight.elsewhere.clear()
        if isinstance(exc, ClusterError):
            raise exc
        raise SweepInterrupted from None

    def _log_dir(self, sweep: SweepRow) -> Path:
        return database(self.opts.db_path).beside("-runs") / sweep.study_name
