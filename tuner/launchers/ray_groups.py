"""The Ray launcher: one GPU-group actor per slot (:mod:`tuner.cluster`), ``run_trial.remote`` per trial.

A trial whose actor died comes back as an ``infrastructure`` result and the actor is replaced
(same slot index), so the loop never sees a Ray exception.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from core.types import EngineKind, EngineSpec, FailureKind, TrialResult, TrialSpec
from tuner.cluster import Cluster, check_reachable
from tuner.launchers.base import Finished, Slot
from workers.node import NodeInfo
from workers.trial import Phase


@dataclass(frozen=True)
class _InFlight:
    slot: int
    spec: TrialSpec
    sent_at: float


class RayLauncher:
    """GPU-group actors on a local or remote Ray cluster (see module docstring)."""

    def __init__(self, engine: EngineSpec, gpus_per_trial: int, *, address: str | None = None,
                 gpus: int | None = None, max_groups: int | None = None) -> None:
        self.engine = engine
        self.starts_processes = True
        if engine.kind == EngineKind.SIM and engine.scenario:  # checked before Ray starts; its GPUs are the fake ones
            from workers.sim.scenario import load_scenario

            scenario = load_scenario(engine.scenario)
            if gpus is None and address is None:
                gpus = scenario.gpu.count
        if address is not None:
            check_reachable(address)  # in seconds; Ray itself retries for minutes
        self.cluster = Cluster(engine, gpus_per_trial, address=address, gpus=gpus, max_groups=max_groups)
        self._refs: dict[Any, _InFlight] = {}

    def start(self) -> tuple[NodeInfo, list[Slot]]:
        """Connect to Ray and start the actors."""
        self.cluster.connect()
        groups = self.cluster.start_groups()
        return groups[0].node, [Slot(g.index, g.node.host, g.gpu_ids, f"Ray node {g.ray_node[:12]}") for g in groups]

    def submit(self, slot: int, spec: TrialSpec) -> None:
        """``run_trial.remote`` on the slot's actor."""
        ref = self.cluster.groups[slot].actor.run_trial.remote(spec)
        self._refs[ref] = _InFlight(slot, spec, time.time())

    def wait(self, timeout_s: float) -> list[Finished]:
        """``ray.wait`` for one result; a lost actor's trial becomes an infrastructure failure."""
        import ray

        if not self._refs:
            return []
        ready, _ = ray.wait(list(self._refs), num_returns=1, timeout=timeout_s)
        return [self._collect(ref) for ref in ready]

    def _collect(self, ref: Any) -> Finished:
        import ray

        sent = self._refs.pop(ref)
        try:
            return Finished(sent.slot, ray.get(ref))
        except ray.exceptions.RayError as exc:
            lines = str(exc).strip().splitlines()
            group = self.cluster.groups[sent.slot]
            result = TrialResult.unreported(
                sent.spec.trial_number, sent.spec.config, node=group.node.host, gpu_ids=group.gpu_ids,
                sglang_version=group.node.sglang_version, started_at=sent.sent_at, kind=FailureKind.INFRASTRUCTURE,
                reason=f"GPU-group actor lost: {lines[-1] if lines else type(exc).__name__}")
            try:
                self.cluster.replace(group)
            except Exception:
                self.cluster.groups[sent.slot] = group
            return Finished(sent.slot, result)

    def now(self) -> float:
        """Wall-clock time."""
        return time.time()

    def phases(self) -> dict[int, Phase]:
        """Each actor's ``status()`` (empty if they do not answer within 2 s)."""
        import ray

        try:
            phases = ray.get([g.actor.status.remote() for g in self.cluster.groups], timeout=2)
        except Exception:
            return {}
        return {g.index: ph for g, ph in zip(self.cluster.groups, phases, strict=True)
                if ph.trial_number is not None}

    def stop_all(self) -> None:
        """Interrupt every actor's trial (servers killed)."""
        self.cluster.stop_all()

    def close(self) -> None:
        """Kill the actors and leave Ray."""
        self.cluster.shutdown()
