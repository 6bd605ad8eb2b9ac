"""The offline launcher: trials answered by the scenario's model on a virtual clock.

No Ray, no processes: ``submit`` computes what the trial would report
(:meth:`workers.sim.offline.OfflineModel.trial`: the closed-loop tok/s of the benchmark, the
scenario's noise, each failure as the simulated server would make it look) and schedules its end at
the virtual time the trial would hold its GPUs. ``wait`` returns the trial that ends first, so with
several slots results come back in the order real launches would finish. Rendering and the result
record are the same as for a launch of the simulated server; only the server is missing.
"""

from __future__ import annotations

import heapq
import socket
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.errors import ClusterError, ConfigError
from core.flags import ran_otherwise
from core.render import render
from core.types import BenchResult, EngineKind, EngineSpec, KernelProfile, TrialResult, TrialSpec
from tuner.launchers.base import Finished, Slot
from workers.gpus import GpuInfo
from workers.node import NodeInfo
from workers.profile import read_trace
from workers.sim.offline import OfflineModel
from workers.sim.profiler import write_trace
from workers.sim.scenario import Outcome
from workers.trial import Phase

OFFLINE_PORT = 30000


@dataclass(order=True)
class _Scheduled:
    ends_at: float
    seq: int
    finished: Finished = field(compare=False)


class OfflineLauncher:
    """Slots of the scenario's modelled GPUs, trials answered by its model (see module docstring)."""

    def __init__(self, engine: EngineSpec, gpus_per_trial: int, *, gpus: int | None = None,
                 max_groups: int | None = None, seed: int | None = None) -> None:
        if engine.kind != EngineKind.SIM or not engine.scenario:
            raise ConfigError("--offline: the space must use the simulated engine (engine: sim, scenario: FILE)")
        self.engine = engine
        self.starts_processes = False  # the scenario's model answers in this process
        self.model = OfflineModel(engine.scenario)
        total = gpus if gpus is not None else self.model.scenario.gpu.count
        count = total // gpus_per_trial
        if max_groups:
            count = min(count, max_groups)
        if count == 0:
            raise ClusterError(f"the scenario models {total} GPU(s); a trial needs gpus_per_trial={gpus_per_trial}")
        self.gpus_per_trial = gpus_per_trial
        self.slot_count = count
        self.seed = seed or 0
        self.clock = time.time()  # virtual: advanced to each trial's end
        self.host = socket.gethostname()
        self._queue: list[_Scheduled] = []
        self._seq = 0

    def start(self) -> tuple[NodeInfo, list[Slot]]:
        """The modelled node and its slots."""
        g = self.model.scenario.gpu
        gpu = GpuInfo(name=f"{g.name} (simulated, offline)", arch=g.arch, count=g.count, driver=g.driver,
                      memory_gb=g.memory_gb)
        node = NodeInfo(host=self.host, sglang_version=self.model.table.version, table=self.model.table, gpu=gpu,
                        time_scale=self.model.scenario.time_scale)
        k = self.gpus_per_trial
        slots = [Slot(i, self.host, tuple(str(i * k + j) for j in range(k)), "offline")
                 for i in range(self.slot_count)]
        return node, slots

    def submit(self, slot: int, spec: TrialSpec) -> None:
        """Model the trial now; it ends when its modelled duration has passed on the virtual clock."""
        cmd = render(spec.config, self.model.table, self.engine, host="127.0.0.1", port=OFFLINE_PORT + slot)
        modelled = self.model.trial(spec.config, spec.bench, spec.startup_timeout_s,
                                    launch_seed=self.seed * 1_000_003 + spec.trial_number)
        k = self.gpus_per_trial
        ttft_ms = modelled.outcome.ttft_ms / self.model.scenario.time_scale
        bench = None if modelled.tok_s is None else _bench_result(modelled.tok_s, spec, ttft_ms,
                                                                  modelled.window_tok_s)
        result = TrialResult(
            trial_number=spec.trial_number, config_key=spec.config.key(), argv=cmd.argv, env=dict(cmd.env),
            sglang_version=self.model.table.version, node=self.host,
            gpu_ids=spec.gpu_ids or tuple(str(slot * k + j) for j in range(k)), started_at=self.clock,
            finished_at=self.clock + modelled.duration_s, startup_s=modelled.startup_s, bench=bench,
            failure_kind=modelled.failure_kind, failure_reason=modelled.failure_reason,
            log_tail="\n".join(modelled.log.splitlines()[-20:]), server_log=modelled.log,
            profile=self._profile(spec, modelled.outcome) if bench is not None and spec.profile_steps else None,
            curve=self._curve(spec, modelled.outcome) if bench is not None else (),
            ran_as=ran_otherwise(spec.config.flags, dict(modelled.outcome.ran_as)) if modelled.startup_s is not None
            else {})
        self._seq += 1
        heapq.heappush(self._queue, _Scheduled(result.finished_at, self._seq, Finished(slot, result)))

    def _curve(self, spec: TrialSpec, outcome: Outcome) -> tuple[BenchResult, ...]:
        """The benchmark at each of the spec's further concurrencies, as the model answers it."""
        scenario = self.model.scenario
        out = []
        for c in spec.more_concurrencies:
            at_c = replace(spec, bench=replace(spec.bench, concurrency=c))
            tok_s = outcome.expected_tok_s(c, spec.bench.output_len, scenario.saturation_c) * scenario.time_scale
            out.append(_bench_result(tok_s, at_c, outcome.ttft_ms / scenario.time_scale))
        return tuple(out)

    def _profile(self, spec: TrialSpec, outcome: Outcome) -> KernelProfile:
        """The trace the simulated server's profiler would write for this trial, read back."""
        where = Path(spec.log_dir) / f"trial-{spec.trial_number:04d}-profile"
        return read_trace(write_trace(outcome, self.model.scenario.saturation_c, where, spec.profile_steps),
                          spec.profile_steps)

    def wait(self, timeout_s: float) -> list[Finished]:
        """The trial that ends first (the virtual clock moves to its end)."""
        if not self._queue:
            return []
        item = heapq.heappop(self._queue)
        self.clock = max(self.clock, item.ends_at)
        return [item.finished]

    def now(self) -> float:
        """The virtual clock (the end of the last trial returned)."""
        return self.clock

    def phases(self) -> dict[int, Phase]:
        """Nothing to show: offline trials have no phases."""
        return {}

    def stop_all(self) -> None:
        """Nothing runs: trials in flight still come back through :meth:`wait`."""

    def close(self) -> None:
        """Nothing to release."""
        self._queue.clear()


def _bench_result(tok_s: float, spec: TrialSpec, ttft_ms: float, windows: tuple[float, ...] = ()) -> BenchResult:
    """The benchmark's metrics for a modelled aggregate rate ``tok_s`` at the spec's concurrency
    (``windows``: each window's reading, all ``tok_s`` when not given)."""
    c, out = spec.bench.concurrency, spec.bench.output_len
    per_user = tok_s / c
    tpot = 1000.0 / per_user
    e2e = ttft_ms + tpot * (out - 1)
    duration = spec.bench.duration_s * spec.bench.repeats
    completed = max(1, round(duration * 1000.0 / e2e * c))

    def pct(v: float) -> dict[str, float]:
        return {"p50": v, "p90": v, "p99": v, "mean": v}

    windows = windows or (tok_s,) * spec.bench.repeats
    return BenchResult(tok_s=tok_s, window_tok_s=windows, request_throughput=completed / duration,
                       per_user_tok_s=per_user, ttft_ms=pct(ttft_ms), tpot_ms=pct(tpot), itl_ms=pct(tpot),
                       e2e_ms=pct(e2e), completed=completed, failed=0, output_tokens=round(tok_s * duration),
                       output_chunks=round(tok_s * duration), achieved_concurrency=float(c), concurrency=c,
                       held_concurrency=True, accept_length=None, duration_s=duration,
                       spread=(max(windows) - min(windows)) / tok_s)
