"""The sweep: an Optuna study (ask/tell, one writer) driving GPU-group actors through Ray.

Loop: while fewer than ``budget`` configurations have been launched, give every idle group a
trial (``ask`` -> sample -> answered from the store if that configuration was already measured,
else ``run_trial.remote``); ``ray.wait`` for results and record each as it comes
(:mod:`tuner.recording`). Infrastructure failures are re-queued once. A RUNNING trial left by a
dead driver is failed and re-queued at start. The first trial is the baseline. With ``confirm``,
the best configurations are then measured once more and ranked by their median.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from db.store import Store, SweepRow, sqlite_url
from tuner.cluster import Cluster, Group
from tuner.errors import ClusterError, ConfigError, StudyError
from tuner.live import GroupView, SweepView
from tuner.recording import INFEASIBLE_VALUE, Recorder, artifact_store
from tuner.redact import scrub, secret_values
from tuner.results import SweepResults
from tuner.sampler import make_sampler
from tuner.space import ForbiddenConfig, SearchSpace
from tuner.space_loader import apply_hardware, check_flags, load_space
from tuner.watchdog import start_watchdog, stop_watchdog
from workers.types import Config, FailureKind, TrialResult, TrialSpec

STOP = threading.Event()  # set by the CLI's SIGINT/SIGTERM handler; checked by the loop
MAX_CONSECUTIVE_REPEATS = 100
MAX_CONSECUTIVE_INFRA_FAILURES = 4  # per group: then the nodes, not the configurations, are broken
CONFIRM_ROUNDS = 3  # --confirm: a confirmation that reorders the leaders brings the new ones in, this often


@dataclass(frozen=True)
class SweepOptions:
    """Everything `tuner sweep` takes."""

    space_path: str
    db_path: str = "tuner.db"
    study_name: str | None = None
    budget: int = 40
    confirm: int = 0
    address: str | None = None
    gpus: int | None = None
    max_groups: int | None = None
    sglang_python: str | None = None
    seed: int | None = None


@dataclass
class Pending:
    """A trial in flight on a group."""

    trial: optuna.Trial
    config: Config
    group: Group
    baseline: bool
    retry_of: int | None
    repeat_of: int | None
    sent_at: float = field(default_factory=time.time)


@dataclass
class Quota:
    """How many more launches a phase may start: up to the budget, or the queued confirmations."""

    budget: int
    confirmations: int | None = None

    def open(self, launched: int, pending: int) -> bool:
        """May another trial be launched?"""
        if self.confirmations is not None:
            return self.confirmations > 0
        return launched + pending < self.budget


class SweepInterrupted(Exception):
    """Ctrl-C / SIGTERM: every server was stopped, the trials in flight were re-queued."""


def request_stop() -> None:
    """Ask a running sweep to stop (signal handlers call this, then raise KeyboardInterrupt)."""
    STOP.set()


def open_study(db_path: str | Path, name: str, space: SearchSpace | None, seed: int | None = None,
               create: bool = True) -> optuna.Study:
    """The Optuna study of a sweep on the sweep database (StudyError if missing and not ``create``)."""
    storage = optuna.storages.RDBStorage(sqlite_url(db_path), engine_kwargs={"connect_args": {"timeout": 30}})
    sampler = make_sampler(space.violates, seed) if space is not None else None
    if not create:
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError as exc:
            raise StudyError(f"{db_path}: no study named {name!r}") from exc
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize", sampler=sampler,
                                load_if_exists=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.set_metric_names(["tok/s@C16"])
    return study


def check_resumable(study: optuna.Study, space: SearchSpace, db_path: str | Path) -> None:
    """ConfigError when a parameter of ``space`` is sampled differently from how the study's earlier
    trials sampled it (Optuna cannot continue a study whose choices changed)."""
    recorded: dict[str, optuna.distributions.BaseDistribution] = {}
    for trial in study.get_trials(deepcopy=False):
        for name, dist in trial.distributions.items():
            recorded.setdefault(name, dist)
    for param in space.params:
        old, new = recorded.get(param.name), param.distribution()
        if old is None:
            continue
        try:
            optuna.distributions.check_distribution_compatibility(old, new)
        except ValueError:
            raise ConfigError(
                f"{param.path}: now {_described(new)}, but study {study.study_name!r} in {db_path} sampled it "
                f"from {_described(old)}; give the changed space its own --study name (or put the old values "
                "back)") from None


def _described(dist: optuna.distributions.BaseDistribution) -> str:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return f"choices [{', '.join(map(str, dist.choices))}]"
    if isinstance(dist, optuna.distributions.IntDistribution | optuna.distributions.FloatDistribution):
        return f"range {dist.low}..{dist.high}" + (" (log)" if dist.log else "")
    return repr(dist)


class Sweep:
    """One `tuner sweep` run (see module docstring)."""

    store: Store
    recorder: Recorder
    _infra_failures = 0
    _groups: list[Group] = []  # noqa: RUF012 - replaced per loop

    def __init__(self, options: SweepOptions, view_factory: Any) -> None:
        self.opts = options
        self.view_factory = view_factory

    # ---- setup ------------------------------------------------------------------------------
    def run(self) -> SweepRow:
        """Run to the budget; returns the sweep. Raises SweepInterrupted on Ctrl-C."""
        STOP.clear()
        space = load_space(self.opts.space_path)  # a bad file stops here: nothing written, nothing started
        engine = space.engine(self.opts.sglang_python)
        if engine.scenario:
            from workers.sim.scenario import load_scenario

            load_scenario(engine.scenario)
        cluster = Cluster(engine, space.file.gpus_per_trial, address=self.opts.address, gpus=self.opts.gpus,
                          max_groups=self.opts.max_groups)
        watchdog = start_watchdog()
        try:
            cluster.connect()
            groups = cluster.start_groups()
            node = groups[0].node
            check_flags(space, node.table)
            arch = space.file.gpu or (node.gpu.arch if node.gpu else None)
            space = apply_hardware(space, arch)
            self.store = Store(self.opts.db_path)
            name = self.opts.study_name or space.name
            study = open_study(self.opts.db_path, name, space, self.opts.seed)
            check_resumable(study, space, self.opts.db_path)
            gpu = node.gpu
            sweep = self.store.ensure_sweep(
                name, space_path=str(Path(self.opts.space_path).resolve()),
                space_text=scrub(space.text, secret_values((), space.base.env, space.base.flags)),
                engine=engine.kind, sglang_version=node.sglang_version,
                gpu_name=gpu.name if gpu else "unknown", gpu_arch=arch, gpu_count=gpu.count if gpu else 0,
                driver=gpu.driver if gpu else "unknown", hosts=sorted({g.node.host for g in groups}),
                budget=self.opts.budget,
                roofline_tok_s=space.file.roofline.tok_s if space.file.roofline else None,
                time_scale=node.time_scale)
            self.recorder = Recorder(self.store, sweep, artifact_store(self.opts.db_path))
            view = self.view_factory(name, self.opts.budget, node.time_scale)
            view.groups = [GroupView(f"{g.index} {g.node.host} gpu {','.join(g.gpu_ids)}") for g in groups]
            with view:
                view.log(f"study {name}: {len(groups)} group(s) of {space.file.gpus_per_trial} GPU(s), "
                         f"SGLang {node.sglang_version} ({node.table.source}), GPU {arch or 'unknown'}")
                for g in groups:
                    view.log(f"group {g.index}: {g.node.host} (Ray node {g.ray_node[:12]}), GPUs "
                             f"{','.join(g.gpu_ids)}")
                for p in space.pruned:
                    view.log(f"pruned {p.reason}")
                self._recover(study, sweep)
                done = self.store.count_launched(sweep.id)
                if done >= self.opts.budget:
                    view.log(f"study {name} already has {done} finished trials (--budget {self.opts.budget}): "
                             "nothing to launch; raise --budget to run more")
                self._loop(study, sweep, space, cluster, view, Quota(self.opts.budget))
                if self.opts.confirm:
                    self._confirm(study, sweep, space, cluster, view)
            return sweep
        finally:
            cluster.shutdown()
            if hasattr(self, "store"):
                self.store.close()
            stop_watchdog(watchdog)

    def _recover(self, study: optuna.Study, sweep: SweepRow) -> None:
        """Fail and re-queue the trials a dead driver left RUNNING."""
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            study._storage.set_trial_user_attr(t._trial_id, "status", "interrupted")
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            if self.store.run(sweep.id, t.number) is None:
                study.enqueue_trial(t.params, user_attrs={**_carried(t.user_attrs), "retry_of": t.number})

    def _confirm(self, study: optuna.Study, sweep: SweepRow, space: SearchSpace, cluster: Cluster,
                 view: SweepView) -> None:
        """Measure the ``confirm`` best configurations once more, until the ``confirm`` best by median
        have all been measured twice (a confirmation that drops its configuration down the ranking
        brings the new leader in), at most ``CONFIRM_ROUNDS`` rounds."""
        for done_rounds in range(CONFIRM_ROUNDS + 1):
            results = SweepResults(sweep, self.store.runs(sweep.id))
            leaders = [r for r in results.ranked()[: self.opts.confirm]
                       if r.status == "ok" and len(results.samples(r.config_key)) < 2]
            if not leaders:
                return
            if done_rounds == CONFIRM_ROUNDS:
                view.log(f"after {CONFIRM_ROUNDS} confirmation rounds the ranking still moves; "
                         "the best may rest on one measurement")
                return
            view.log(f"confirming {len(leaders)} of the {self.opts.confirm} best configuration(s) "
                     "with a second measurement")
            for run in leaders:
                study.enqueue_trial(run.params, user_attrs={"repeat_of": run.trial_number,
                                                            "baseline": run.baseline})
            self._loop(study, sweep, space, cluster, view, Quota(self.opts.budget, confirmations=len(leaders)))

    # ---- the loop ---------------------------------------------------------------------------
    def _loop(self, study: optuna.Study, sweep: SweepRow, space: SearchSpace, cluster: Cluster,
              view: SweepView, quota: Quota) -> None:
        import ray

        self._groups = cluster.groups
        idle = list(cluster.groups)
        pending: dict[Any, Pending] = {}
        waiting_on: dict[str, list[tuple[optuna.Trial, Config]]] = {}
        repeats = 0
        distinct = distinct_configurations(space)
        need_baseline = not any(r.baseline for r in self.store.runs(sweep.id)) and not any(
            t.user_attrs.get("baseline") for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        try:
            while True:
                if STOP.is_set():  # in case a library swallowed the KeyboardInterrupt
                    raise KeyboardInterrupt
                launched = self.store.count_launched(sweep.id)
                exhausted = quota.confirmations is None and (
                    repeats >= MAX_CONSECUTIVE_REPEATS or launched >= distinct)
                while idle and quota.open(launched, len(pending)) and not exhausted:
                    trial = study.ask()
                    baseline = bool(trial.user_attrs.get("baseline"))
                    repeat_of = trial.user_attrs.get("repeat_of")
                    if need_baseline and "retry_of" not in trial.user_attrs and repeat_of is None:
                        trial.set_user_attr("baseline", True)
                        baseline, need_baseline = True, False
                    try:
                        config = space.baseline() if baseline else space.sample(trial)
                    except ForbiddenConfig as exc:
                        trial.set_user_attr("status", "forbidden")
                        trial.set_constraint("forbidden", 1.0)
                        study.tell(trial, INFEASIBLE_VALUE)
                        view.log(f"trial {trial.number}: {exc}")
                        continue
                    key = config.key()
                    if repeat_of is None:
                        prior = self.store.measured(sweep.id, key)
                        if prior is not None:
                            repeats += 1
                            run = self.recorder.answer_from_store(study, trial, config, prior)
                            view.finished(run, None, self.store.count_launched(sweep.id))
                            exhausted = repeats >= MAX_CONSECUTIVE_REPEATS
                            continue
                        if any(p.config.key() == key for p in pending.values()):
                            waiting_on.setdefault(key, []).append((trial, config))
                            continue
                    elif quota.confirmations is not None:
                        quota.confirmations -= 1
                    repeats = 0
                    group = idle.pop(0)
                    spec = TrialSpec(trial_number=trial.number, config=config, engine=cluster.engine,
                                     bench=space.bench_config(None if repeat_of is not None
                                                              else self.store.best_tok_s(sweep.id)),
                                     gate=space.gate_config(), startup_timeout_s=space.file.startup_timeout_s,
                                     log_dir=str(self._log_dir(sweep)))
                    ref = group.actor.run_trial.remote(spec)
                    pending[ref] = Pending(trial, config, group, baseline, trial.user_attrs.get("retry_of"),
                                           repeat_of)
                    view.started(group.index, trial.number, config.params)
                if not pending:
                    if exhausted and quota.confirmations is None and launched < quota.budget:
                        view.log(f"search space exhausted after {launched} distinct configurations")
                    return
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                self._poll(cluster, view)
                for ref in ready:
                    p = pending.pop(ref)
                    self._finish(study, sweep, p, self._result(ref, p, cluster), view)
                    idle.append(cluster.groups[p.group.index])
                    for trial, config in waiting_on.pop(p.config.key(), []):
                        prior = self.store.measured(sweep.id, p.config.key())
                        if prior is None:
                            study.tell(trial, state=TrialState.FAIL)
                            continue
                        run = self.recorder.answer_from_store(study, trial, config, prior)
                        view.finished(run, None, self.store.count_launched(sweep.id))
        except (KeyboardInterrupt, ClusterError) as exc:
            why = "interrupted by the user" if isinstance(exc, KeyboardInterrupt) else "the sweep stopped"
            view.log(f"{why}: stopping every server ...")
            cluster.stop_all()
            self._infra_failures = -len(pending)  # these interruptions are not more evidence
            for ref, p in list(pending.items()):
                try:
                    result = ray.get(ref, timeout=60)
                except Exception:
                    result = self._synthetic(p, FailureKind.INTERRUPTED, why)
                if result.failure_kind is None:
                    result = self._synthetic(p, FailureKind.INTERRUPTED, why)
                self._finish(study, sweep, p, result, view)
            if isinstance(exc, ClusterError):
                raise
            raise SweepInterrupted from None

    def _finish(self, study: optuna.Study, sweep: SweepRow, p: Pending, result: TrialResult,
                view: SweepView) -> None:
        run = self.recorder.finish(study, p.trial, p.config, result, baseline=p.baseline, repeat_of=p.repeat_of)
        self._infra_failures = self._infra_failures + 1 if run.status == "failed" else 0
        if run.status == "interrupted" or (run.status == "failed" and p.retry_of is None):
            attrs = {"retry_of": p.trial.number, "baseline": p.baseline}
            if p.repeat_of is not None:
                attrs["repeat_of"] = p.repeat_of
            study.enqueue_trial(p.trial.params, user_attrs=attrs)
        view.finished(run, result.finished_at - result.started_at, self.store.count_launched(sweep.id))
        if self._infra_failures >= MAX_CONSECUTIVE_INFRA_FAILURES * max(len(self._groups), 1):
            raise ClusterError(f"{self._infra_failures} trials in a row failed for reasons of the nodes, not of "
                               f"their configurations; last: {run.failure_reason}")

    def _log_dir(self, sweep: SweepRow) -> Path:
        path = Path(self.opts.db_path).resolve()
        return path.with_name(path.stem + "-runs") / sweep.study_name

    def _poll(self, cluster: Cluster, view: SweepView) -> None:
        import ray

        try:
            phases = ray.get([g.actor.status.remote() for g in cluster.groups], timeout=2)
        except Exception:
            return
        for g, ph in zip(cluster.groups, phases, strict=True):
            if ph.trial_number is not None:
                view.set_phase(g.index, ph.trial_number, ph.phase, ph.since)

    def _synthetic(self, p: Pending, kind: FailureKind, reason: str) -> TrialResult:
        return TrialResult(trial_number=p.trial.number, config_key=p.config.key(), argv=(),
                           env=dict(p.config.env), sglang_version=p.group.node.sglang_version,
                           node=p.group.node.host, gpu_ids=p.group.gpu_ids, started_at=p.sent_at,
                           finished_at=time.time(), failure_kind=kind, failure_reason=reason)

    def _result(self, ref: Any, p: Pending, cluster: Cluster) -> TrialResult:
        import ray

        try:
            result: TrialResult = ray.get(ref)
            return result
        except ray.exceptions.RayError as exc:
            lines = str(exc).strip().splitlines()
            result = self._synthetic(p, FailureKind.INFRASTRUCTURE,
                                     f"GPU-group actor lost: {lines[-1] if lines else type(exc).__name__}")
            try:
                cluster.replace(p.group)
            except Exception:
                cluster.groups[p.group.index] = p.group
            return result


def distinct_configurations(space: SearchSpace, limit: int = 50_000) -> float:
    """How many different servers the space (and its baseline) can launch; ``inf`` when too many to list."""
    if math.isinf(space.cardinality()) or space.cardinality() > limit:
        return math.inf
    keys = {space.from_params(params).key() for params in space.iter_configs()}
    return len(keys | {space.baseline().key()})


def _carried(attrs: dict[str, Any]) -> dict[str, Any]:
    """The user attributes a re-queued trial keeps (baseline, confirmation)."""
    return {k: attrs[k] for k in ("baseline", "repeat_of") if k in attrs}
