"""Reading a finished (or running) sweep back: which study, its runs ranked, best vs baseline."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import StudyError
from core.types import Objective, RunStatus
from db.store import RunRow, Store, SweepRow
from tuner.parallelism import per_objective
from workers.notices import Notice, notices_in


@dataclass(frozen=True)
class SweepResults:
    """A sweep with its runs."""

    sweep: SweepRow
    runs: list[RunRow]
    rules: tuple[str, ...] = ()  # the failure rules the sweep learned (tuner.failure_rules), as text
    notices: dict[int, tuple[Notice, ...]] = field(default_factory=dict)  # by trial: what SGLang said

    def notices_by_kind(self) -> dict[str, tuple[Notice, list[int]]]:
        """Each kind of notice SGLang gave: its first occurrence and the trials that gave it."""
        kinds: dict[str, tuple[Notice, list[int]]] = {}
        for number, said in sorted(self.notices.items()):
            for notice in said:
                kinds.setdefault(notice.kind, (notice, []))[1].append(number)
        return kinds

    def launches(self) -> int:
        """Launches the budget counts: distinct configurations measured or failed, and re-measured
        surprises (confirmations are not counted)."""
        return sum(r.status.launched and (r.repeat_of is None or bool(r.remeasure)) for r in self.runs)

    def avoided(self) -> int:
        """Proposals answered by a learned failure rule instead of a launch."""
        return sum(r.status == RunStatus.AVOIDED for r in self.runs)

    def samples(self, config_key: str) -> list[float]:
        """Every tok/s@C16 measured for a configuration: the first launch and its confirmations."""
        return [r.tok_s for r in self.runs
                if r.config_key == config_key and r.status == RunStatus.OK and r.tok_s is not None]

    @property
    def per_gpu(self) -> bool:
        """The sweep ranks by tok/s@C16 per GPU (``objective: per_gpu``)."""
        return self.sweep.objective == Objective.PER_GPU

    def score(self, run: RunRow) -> float:
        """What the sweep ranks by: the median of a configuration's tok/s@C16 measurements, per GPU when
        the objective says so."""
        return per_objective(self.median(run), run.flags, self.sweep.objective)

    def median(self, run: RunRow) -> float:
        """A configuration's tok/s@C16 of one server: the median of its measurements."""
        return statistics.median(self.samples(run.config_key) or [0.0])

    def measured(self) -> list[RunRow]:
        """The first measured run of each configuration, best (median) first."""
        first = [r for r in self.runs if r.status == RunStatus.OK and r.tok_s is not None and r.repeat_of is None]
        return sorted(first, key=lambda r: -self.score(r))

    def ranked(self) -> list[RunRow]:
        """Measured configurations by median tok/s (best first), then every other run by trial number."""
        ok = self.measured()
        seen = {r.trial_number for r in ok}
        return ok + [r for r in self.runs if r.trial_number not in seen]

    def best(self) -> RunRow | None:
        """The first run of the configuration with the best median tok/s@C16."""
        ok = self.measured()
        return ok[0] if ok else None

    def best_profile(self) -> RunRow | None:
        """The latest run of the best configuration that was profiled (``--profile-best``), if any; its
        ``profile`` is a :class:`core.types.KernelProfile` dict or ``{"error": why}``."""
        best = self.best()
        return self._latest_with(best.config_key, "profile") if best else None

    def curve(self, run: RunRow) -> list[dict[str, Any]]:
        """The latest measurements of ``run``'s configuration at other concurrencies (``--front-at``),
        BenchResult dicts by concurrency; [] if none."""
        latest = self._latest_with(run.config_key, "curve")
        return sorted(latest.curve or [], key=lambda b: b["concurrency"]) if latest else []

    def _latest_with(self, config_key: str, field: str) -> RunRow | None:
        """The latest run of a configuration whose ``field`` (a follow-up's record) is set."""
        return next((r for r in reversed(self.runs) if r.config_key == config_key and getattr(r, field)), None)

    def baseline(self) -> RunRow | None:
        """The baseline run (base settings only)."""
        return next((r for r in self.runs if r.baseline and r.status in (RunStatus.OK, RunStatus.INFEASIBLE)), None)

    def gpu_busy(self) -> tuple[float, int] | None:
        """(share of GPU-time that launched trials held their GPUs, GPUs) from the first launch's start to
        the last one's end; None without two launches with GPUs and times."""
        runs = [r for r in self.runs if r.status.launched and r.gpu_ids and r.started_at and r.finished_at]
        if len(runs) < 2:
            return None
        gpus = {(r.node, g) for r in runs for g in r.gpu_ids}
        start = min(r.started_at for r in runs if r.started_at)
        end = max(r.finished_at for r in runs if r.finished_at)
        span = (end - start).total_seconds() * len(gpus)
        held = sum(len(r.gpu_ids) * (r.finished_at - r.started_at).total_seconds() for r in runs
                   if r.finished_at and r.started_at)
        return (held / span if span > 0 else 0.0), len(gpus)

    def failures_by_kind(self) -> dict[str, int]:
        """How many launched runs failed, per failure kind."""
        out: dict[str, int] = {}
        for r in self.runs:
            if r.status in (RunStatus.INFEASIBLE, RunStatus.FAILED) and r.failure_kind:
                out[r.failure_kind] = out.get(r.failure_kind, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def load_results(db_path: str | Path, study: str | None, *, with_notices: bool = False) -> SweepResults:
    """The sweep ``study`` (or the most recent one) in ``db_path``; StudyError if none. ``with_notices``
    also reads every server log for what SGLang said (``show``, the report; not ``export`` or ``jobs``)."""
    store = Store(db_path, read_only=True)
    try:
        if study is None:
            sweeps = store.sweeps()
            if not sweeps:
                raise StudyError(f"{db_path}: no sweep recorded yet")
            sweep = sweeps[0]
        else:
            found = store.sweep(study)
            if found is None:
                names = ", ".join(s.study_name for s in store.sweeps()) or "none"
                raise StudyError(f"{db_path}: no study named {study!r} (studies: {names})")
            sweep = found
        notices: dict[int, tuple[Notice, ...]] = {}
        if with_notices:
            notices = {n: said for n, log in store.server_logs(sweep.id).items() if (said := notices_in(log))}
        return SweepResults(sweep, store.runs(sweep.id), tuple(text for text, _ in store.rules(sweep.id)), notices)
    finally:
        store.close()
