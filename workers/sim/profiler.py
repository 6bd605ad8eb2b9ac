"""SGLang's profiler endpoints as the simulated engine answers them.

``/start_profile`` with ``num_steps`` records that many decode steps of whatever load runs, then
writes ``<output_dir>/<unix time>-TP-0.trace.json.gz`` by itself, a Chrome trace whose GPU kernels
(``cat: kernel``, ``ph: X``, ``dur`` in microseconds) follow the configuration's modelled kernel mix;
``/stop_profile`` writes it at once, or answers 500 when no profile is running, as SGLang 0.5.17 did.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.sim.engine import Scheduler
from workers.sim.scenario import Outcome

DEFAULT_STEPS = 5


@dataclass
class _Recording:
    output_dir: Path
    steps: int
    from_step: float


class SimProfiler:
    """One server's profiler: at most one recording at a time."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.sched = scheduler
        self.recording: _Recording | None = None
        scheduler.on_step = self.poll

    def start(self, body: dict[str, Any]) -> str | None:
        """Begin recording; an error message when the request is not acceptable."""
        if self.recording is not None:
            return "Profiling is already in progress. Call /stop_profile first."
        steps = int(body.get("num_steps") or DEFAULT_STEPS)
        out = Path(str(body.get("output_dir") or "/tmp"))
        self.recording = _Recording(out, max(steps, 1), self.sched.batch_steps)
        return None

    def poll(self) -> None:
        """Write the trace once the recording has seen its steps (called as the server runs)."""
        rec = self.recording
        if rec is not None and self.sched.batch_steps - rec.from_step >= rec.steps:
            self._write(rec, rec.steps)

    def stop(self) -> bool:
        """Write the trace now; False when nothing was recording."""
        rec = self.recording
        if rec is None:
            return False
        self._write(rec, max(int(self.sched.batch_steps - rec.from_step), 1))
        return True

    def _write(self, rec: _Recording, steps: int) -> None:
        self.recording = None
        write_trace(self.sched.outcome, self.sched.scenario.saturation_c, rec.output_dir, steps)


def write_trace(outcome: Outcome, saturation_c: float, output_dir: Path, steps: int) -> Path:
    """Write the trace of ``steps`` decode steps at C16 of ``outcome``'s kernel mix (durations in
    modelled hardware microseconds) as SGLang names it; returns its path."""
    per_stream = outcome.decode_tok_s(16, saturation_c) / 16
    step_us = 1e6 * outcome.accept_len / per_stream
    weights = dict(outcome.kernels)
    whole = sum(weights.values()) or 1.0
    events: list[dict[str, Any]] = []
    ts = 0.0
    for step in range(steps):
        for name, weight in weights.items():
            dur = step_us * weight / whole
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": round(ts, 3),
                           "dur": round(dur, 3), "args": {"step": step}})
            ts += dur
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / f"{time.time():.6f}-TP-0.trace.json.gz"
    partial = path.with_name(path.name + ".part")
    with gzip.open(partial, "wt") as fh:
        json.dump({"schemaVersion": 1, "deviceProperties": [], "traceEvents": events}, fh)
    partial.rename(path)
    return path
