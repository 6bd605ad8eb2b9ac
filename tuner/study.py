"""The sweep: an Optuna study (ask/tell, one writer) driving GPU-group actors through Ray.

Loop: while fewer than ``budget`` configurations have been launched, give every idle group a
trial (``ask`` -> sample -> answered from the store if that configuration was already measured,
else ``run_trial.remote``); ``ray.wait`` for results and handle each as it comes: store it,
attach attributes and artifacts, then ``tell``. Configuration failures are COMPLETE + infeasible
(constraint > 0, so TPE learns); infrastructure failures are FAIL and re-queued once. A RUNNING
trial left by a dead driver is failed and re-queued at start. The first trial is the baseline.
"""

from __future__ import annotations

import math
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.trial import TrialState

from db.store import RunRow, Store, SweepRow, sqlite_url
from tuner.cluster import Cluster, Group
from tuner.errors import StudyError
from tuner.export import launch_script
from tuner.live import SweepView
from tuner.redact import scrub, secret_values
from tuner.sampler import make_sampler
from tuner.space import ForbiddenConfig, SearchSpace, apply_hardware, check_flags, load_space
from tuner.watchdog import start_watchdog, stop_watchdog
from workers.types import Config, FailureKind, TrialResult, TrialSpec

MAX_CONSECUTIVE_REPEATS = 100
INFEASIBLE_VALUE = 0.0


@dataclass(frozen=True)
class SweepOptions:
    """Everything `tuner sweep` takes."""

    space_path: str
    db_path: str = "tuner.db"
    study_name: str | None = None
    budget: int = 40
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
    sent_at: float = field(default_factory=time.time)


class SweepInterrupted(Exception):
    """Ctrl-C / SIGTERM: every server was stopped, the trials in flight were re-queued."""


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


def artifact_store(db_path: str | Path) -> FileSystemArtifactStore:
    """The artifact store beside the database (``<db>-artifacts/``)."""
    path = Path(db_path).resolve()
    base = path.with_name(path.stem + "-artifacts")
    base.mkdir(parents=True, exist_ok=True)
    return FileSystemArtifactStore(str(base))


def status_of(result: TrialResult) -> str:
    """ok | infeasible | interrupted | failed (infrastructure)."""
    if result.ok:
        return "ok"
    assert result.failure_kind is not None
    if result.failure_kind.config_caused:
        return "infeasible"
    return "interrupted" if result.failure_kind == FailureKind.INTERRUPTED else "failed"


class Sweep:
    """One `tuner sweep` run (see module docstring)."""

    store: Store
    artifacts: FileSystemArtifactStore

    def __init__(self, options: SweepOptions, view_factory: Any) -> None:
        self.opts = options
        self.view_factory = view_factory

    # ---- setup ------------------------------------------------------------------------------
    def run(self) -> SweepRow:
        """Run to the budget; returns the sweep. Raises SweepInterrupted on Ctrl-C."""
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
            self.artifacts = artifact_store(self.opts.db_path)
            name = self.opts.study_name or space.name
            study = open_study(self.opts.db_path, name, space, self.opts.seed)
            gpu = node.gpu
            sweep = self.store.ensure_sweep(
                name, space_path=str(Path(self.opts.space_path).resolve()),
                space_text=scrub(space.text, secret_values((), space.base.env, space.base.flags)),
                engine=engine.kind, sglang_version=node.sglang_version,
                gpu_name=gpu.name if gpu else "unknown", gpu_arch=arch, gpu_count=gpu.count if gpu else 0,
                driver=gpu.driver if gpu else "unknown", hosts=sorted({g.node.host for g in groups}),
                budget=self.opts.budget, roofline_tok_s=space.file.roofline.tok_s if space.file.roofline else None,
                time_scale=node.time_scale)
            view = self.view_factory(name, self.opts.budget, node.time_scale)
            from tuner.live import GroupView

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
                self._loop(study, sweep, space, cluster, view)
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
                study.enqueue_trial(t.params, user_attrs={"retry_of": t.number,
                                                          "baseline": bool(t.user_attrs.get("baseline"))})

    # ---- the loop ---------------------------------------------------------------------------
    def _loop(self, study: optuna.Study, sweep: SweepRow, space: SearchSpace, cluster: Cluster,
              view: SweepView) -> None:
        import ray

        idle = list(cluster.groups)
        pending: dict[Any, Pending] = {}
        waiting_on: dict[str, list[tuple[optuna.Trial, Config]]] = {}
        repeats = 0
        cardinality = space.cardinality()
        need_baseline = not any(r.baseline for r in self.store.runs(sweep.id)) and not any(
            t.user_attrs.get("baseline") for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        try:
            while True:
                launched = self.store.count_launched(sweep.id)
                exhausted = repeats >= MAX_CONSECUTIVE_REPEATS or (
                    math.isfinite(cardinality) and launched >= cardinality + 1)
                while idle and launched + len(pending) < self.opts.budget and not exhausted:
                    trial = study.ask()
                    baseline = bool(trial.user_attrs.get("baseline"))
                    if need_baseline and "retry_of" not in trial.user_attrs:
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
                    prior = self.store.measured(sweep.id, key)
                    if prior is not None:
                        repeats += 1
                        self._answer_from_store(study, sweep, trial, config, prior, view)
                        exhausted = repeats >= MAX_CONSECUTIVE_REPEATS
                        continue
                    if any(p.config.key() == key for p in pending.values()):
                        waiting_on.setdefault(key, []).append((trial, config))
                        continue
                    repeats = 0
                    group = idle.pop(0)
                    spec = TrialSpec(trial_number=trial.number, config=config, engine=cluster.engine,
                                     bench=space.bench_config(self.store.best_tok_s(sweep.id)),
                                     gate=space.gate_config(),
                                     startup_timeout_s=space.file.startup_timeout_s,
                                     log_dir=str(self._log_dir(sweep)))
                    ref = group.actor.run_trial.remote(spec)
                    pending[ref] = Pending(trial, config, group, baseline, trial.user_attrs.get("retry_of"))
                    view.started(group.index, trial.number, config.params)
                if not pending:
                    if exhausted and launched < self.opts.budget:
                        view.log(f"search space exhausted after {launched} distinct configurations")
                    return
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                self._poll(cluster, view)
                for ref in ready:
                    p = pending.pop(ref)
                    result = self._result(ref, p, cluster)
                    self._finish(study, sweep, p, result, view)
                    idle.append(cluster.groups[p.group.index])
                    for trial, config in waiting_on.pop(p.config.key(), []):
                        prior = self.store.measured(sweep.id, p.config.key())
                        if prior is not None:
                            self._answer_from_store(study, sweep, trial, config, prior, view)
                        else:
                            study.tell(trial, state=TrialState.FAIL)
        except KeyboardInterrupt:
            view.log("interrupted: stopping every server ...")
            cluster.stop_all()
            for ref, p in list(pending.items()):
                try:
                    result = ray.get(ref, timeout=60)
                except Exception:
                    result = self._synthetic(p, FailureKind.INTERRUPTED, "interrupted by the user")
                if result.failure_kind is None:
                    result = self._synthetic(p, FailureKind.INTERRUPTED, "interrupted by the user")
                self._finish(study, sweep, p, result, view)
            raise SweepInterrupted from None

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

    # ---- recording --------------------------------------------------------------------------
    def _attach(self, trial: optuna.Trial, run: RunRow, sweep: SweepRow, log: str) -> None:
        trial.set_user_attr("status", run.status)
        trial.set_user_attr("config_key", run.config_key)
        if run.tok_s is not None:
            trial.set_user_attr("tok_s_c16", run.tok_s)
        if run.failure_kind:
            trial.set_user_attr("failure_kind", run.failure_kind)
            trial.set_user_attr("failure_reason", run.failure_reason[:500])
        if run.metrics:
            m = run.metrics
            trial.set_user_attr("metrics", {k: v for k, v in m.items() if k != "errors"})
            if m.get("early_stopped"):
                trial.set_user_attr("early_stopped", True)
            for name, value in (("ttft_p50_ms", m["ttft_ms"]["p50"]), ("tpot_p50_ms", m["tpot_ms"]["p50"]),
                                ("itl_p50_ms", m["itl_ms"]["p50"]), ("concurrency", m["achieved_concurrency"]),
                                ("accept_length", m["accept_length"])):
                if isinstance(value, int | float) and value == value:
                    trial.set_user_attr(name, round(float(value), 3))
        if run.gate:
            trial.set_user_attr("gate", "passed" if run.gate.get("passed") else "failed")
        if run.startup_s is not None:
            trial.set_user_attr("startup_s", round(run.startup_s, 2))
        trial.set_user_attr("node", run.node)
        trial.set_user_attr("gpu_ids", ",".join(run.gpu_ids))
        if run.cached_from is not None:
            trial.set_user_attr("cached_from_trial", run.cached_from)
        with tempfile.TemporaryDirectory() as tmp:
            files: list[tuple[Path, str]] = []
            if log:
                files.append((Path(tmp) / f"trial-{run.trial_number}-server.log", log))
            if run.argv:
                files.append((Path(tmp) / f"trial-{run.trial_number}-launch.sh", launch_script(run, sweep)))
            for path, text in files:
                path.write_text(text)
                upload_artifact(artifact_store=self.artifacts, file_path=str(path), study_or_trial=trial,
                                mimetype="text/plain", encoding="utf-8")

    def _tell(self, study: optuna.Study, trial: optuna.Trial, run: RunRow) -> None:
        if run.status in ("ok", "cached") and run.tok_s is not None:
            trial.set_constraint("failed", 0.0)
            study._storage.set_trial_system_attr(trial._trial_id, "constraints", [0.0])
            study.tell(trial, run.tok_s)
        elif run.status in ("infeasible", "cached"):
            trial.set_constraint("failed", 1.0)
            study._storage.set_trial_system_attr(trial._trial_id, "constraints", [1.0])
            study.tell(trial, INFEASIBLE_VALUE)
        else:
            study.tell(trial, state=TrialState.FAIL)

    def _finish(self, study: optuna.Study, sweep: SweepRow, p: Pending, result: TrialResult,
                view: SweepView) -> None:
        status = status_of(result)
        run = self.store.record(sweep.id, result, p.config, status=status, baseline=p.baseline)
        self._attach(p.trial, run, sweep, self.store.server_log(sweep.id, run.trial_number))
        self._tell(study, p.trial, run)
        if status in ("failed", "interrupted") and (p.retry_of is None or status == "interrupted"):
            study.enqueue_trial(p.trial.params, user_attrs={"retry_of": p.trial.number, "baseline": p.baseline})
        view.finished(run, result.finished_at - result.started_at, self.store.count_launched(sweep.id))

    def _answer_from_store(self, study: optuna.Study, sweep: SweepRow, trial: optuna.Trial, config: Config,
                           prior: RunRow, view: SweepView) -> None:
        now = time.time()
        result = TrialResult(trial_number=trial.number, config_key=prior.config_key, argv=tuple(prior.argv),
                             env=dict(prior.env), sglang_version=prior.sglang_version, node=prior.node,
                             gpu_ids=tuple(prior.gpu_ids), started_at=now, finished_at=now,
                             failure_kind=FailureKind(prior.failure_kind) if prior.failure_kind else None,
                             failure_reason=prior.failure_reason)
        run = self.store.record(sweep.id, result, config, status="cached", cached_from=prior.trial_number)
        run = self.store.record_cached_metrics(sweep.id, run.trial_number, prior)
        self._attach(trial, run, sweep, "")
        self._tell(study, trial, run)
        view.finished(run, None, self.store.count_launched(sweep.id))
