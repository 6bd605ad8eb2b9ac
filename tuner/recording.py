"""What is written when a trial ends: the store row first, then Optuna attributes and artifacts,
then ``tell`` (attributes and artifacts cannot be added after ``tell``).

Told values: measured -> tok/s@C16; a failure the configuration caused -> COMPLETE with value 0
and the constraint ``failed = 1`` (Optuna 5 ``set_constraint`` plus the legacy ``constraints``
list optuna-dashboard 0.21 reads), so TPE learns to avoid it; an infrastructure failure or an
interruption -> FAIL (the study loop re-queues it).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from core.errors import StoreError
from core.types import Config, FailureKind, KernelProfile, RunStatus, TrialResult
from db.location import Database, database
from db.store import RunRow, Store, SweepRow
from tuner.export import launch_script
from tuner.parallelism import per_objective
from workers.notices import notices_in

INFEASIBLE_VALUE = 0.0
SCALAR_METRICS = (("ttft_p50_ms", "ttft_ms"), ("tpot_p50_ms", "tpot_ms"), ("itl_p50_ms", "itl_ms"))


def artifact_store(where: str | Path | Database, *, create: bool = True) -> FileSystemArtifactStore:
    """The artifact store beside the database (``<db>-artifacts/``); a reader does not ``create`` it."""
    base = database(where).beside("-artifacts")
    if create:
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{base}: cannot create the artifact folder: {exc.strerror or exc}") from exc
    return FileSystemArtifactStore(str(base))


def status_of(result: TrialResult) -> RunStatus:
    """ok | infeasible | interrupted | failed (infrastructure)."""
    if result.ok:
        return RunStatus.OK
    assert result.failure_kind is not None
    if result.failure_kind.config_caused:
        return RunStatus.INFEASIBLE
    return RunStatus.INTERRUPTED if result.failure_kind == FailureKind.INTERRUPTED else RunStatus.FAILED


class Recorder:
    """Writes finished trials of one sweep to the store and the Optuna study."""

    def __init__(self, store: Store, sweep: SweepRow, artifacts: FileSystemArtifactStore) -> None:
        self.store = store
        self.sweep = sweep
        self.artifacts = artifacts

    def finish(self, study: optuna.Study, trial: optuna.Trial, config: Config, result: TrialResult, *,
               baseline: bool, repeat_of: int | None = None, remeasure: bool = False) -> RunRow:
        """Record a launched trial and tell Optuna."""
        run = self.store.record(self.sweep.id, result, config, status=status_of(result), baseline=baseline,
                                repeat_of=repeat_of, remeasure=remeasure)
        self._to_optuna(study, trial, run, self.store.server_log(self.sweep.id, run.trial_number))
        return run

    def answer_from_store(self, study: optuna.Study, trial: optuna.Trial, config: Config,
                          prior: RunRow) -> RunRow:
        """A configuration measured before: record a ``cached`` run with its verdict, no launch (so no
        node, GPUs or command line of its own: ``cached_from`` names the run that has them)."""
        now = time.time()
        result = TrialResult(trial_number=trial.number, config_key=prior.config_key, argv=(),
                             env=dict(prior.env), sglang_version=prior.sglang_version, node="",
                             gpu_ids=(), started_at=now, finished_at=now,
                             failure_kind=FailureKind(prior.failure_kind) if prior.failure_kind else None,
                             failure_reason=prior.failure_reason)
        self.store.record(self.sweep.id, result, config, status=RunStatus.CACHED, cached_from=prior.trial_number)
        run = self.store.record_cached_metrics(self.sweep.id, trial.number, prior)
        self._to_optuna(study, trial, run, "")
        return run

    def avoid(self, study: optuna.Study, trial: optuna.Trial, config: Config, reason: str,
              kind: FailureKind) -> RunRow:
        """A proposal a learned failure rule covers: recorded as ``avoided`` (no launch, no budget) and
        told to Optuna as infeasible."""
        now = time.time()
        result = TrialResult(trial_number=trial.number, config_key=config.key(), argv=(), env=dict(config.env),
                             sglang_version=self.sweep.sglang_version, node="", gpu_ids=(), started_at=now,
                             finished_at=now, failure_kind=kind, failure_reason=reason)
        run = self.store.record(self.sweep.id, result, config, status=RunStatus.AVOIDED)
        self._to_optuna(study, trial, run, "")
        return run

    def _to_optuna(self, study: optuna.Study, trial: optuna.Trial, run: RunRow, log: str) -> None:
        """Attributes, artifacts, then ``tell``; none of them when another driver, taking this one for
        dead, closed the trial already (its run stays in the store, which is what ``show`` reads)."""
        try:
            self._attach(trial, run, log)
            self._tell(study, trial, run)
        except UpdateFinishedTrialError:
            pass

    def _attach(self, trial: optuna.Trial, run: RunRow, log: str) -> None:
        attrs: dict[str, object] = {"status": run.status, "config_key": run.config_key, "node": run.node,
                                    "gpu_ids": ",".join(run.gpu_ids)}
        if run.tok_s is not None:
            attrs["tok_s_c16"] = run.tok_s
        if run.failure_kind:
            attrs.update(failure_kind=run.failure_kind, failure_reason=run.failure_reason[:500])
        if run.metrics:
            m = run.metrics
            attrs["metrics"] = {k: v for k, v in m.items() if k != "errors"}
            scalars = {name: m[key]["p50"] for name, key in SCALAR_METRICS}
            scalars.update(concurrency=m["achieved_concurrency"], accept_length=m["accept_length"])
            attrs.update({k: round(float(v), 3) for k, v in scalars.items()
                          if isinstance(v, int | float) and v == v})
            if m.get("early_stopped"):
                attrs["early_stopped"] = True
        if run.gate:
            attrs["gate"] = "passed" if run.gate.get("passed") else "failed"
        if run.startup_s is not None:
            attrs["startup_s"] = round(run.startup_s, 2)
        if run.cached_from is not None:
            attrs["cached_from_trial"] = run.cached_from
        if run.repeat_of is not None:
            attrs["repeat_of_trial"] = run.repeat_of
        if run.profile and run.profile.get("kernels"):  # the dashboard shows where the GPU time went
            kernels = KernelProfile.from_dict(run.profile).kernels[:5]
            attrs["kernel_profile"] = [f"{k.short_name()} {k.share:.1%}" for k in kernels]
        elif run.profile:
            attrs["kernel_profile"] = [f"no profile: {run.profile.get('error', '')}"]
        said = notices_in(log)
        if said:  # the dashboard shows SGLang's warnings and adjustments with their fix
            attrs["sglang_notices"] = [n.describe() for n in said]
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        with tempfile.TemporaryDirectory() as tmp:
            files: list[tuple[Path, str]] = []
            if log:
                files.append((Path(tmp) / f"trial-{run.trial_number}-server.log", log))
            if run.argv:
                files.append((Path(tmp) / f"trial-{run.trial_number}-launch.sh", launch_script(run, self.sweep)))
            for path, text in files:
                path.write_text(text)
                upload_artifact(artifact_store=self.artifacts, file_path=str(path), study_or_trial=trial,
                                mimetype="text/plain", encoding="utf-8")

    def _tell(self, study: optuna.Study, trial: optuna.Trial, run: RunRow) -> None:
        if run.status in (RunStatus.OK, RunStatus.CACHED) and run.tok_s is not None:
            violation = 0.0
        elif run.status in (RunStatus.INFEASIBLE, RunStatus.CACHED, RunStatus.AVOIDED):
            violation = 1.0
        else:
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            return
        trial.set_constraint("failed", violation)
        study._storage.set_trial_system_attr(trial._trial_id, "constraints", [violation])
        value = INFEASIBLE_VALUE
        if violation == 0.0 and run.tok_s is not None:
            value = per_objective(run.tok_s, run.flags, self.sweep.objective)
        study.tell(trial, value, skip_if_finished=True)
