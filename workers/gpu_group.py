"""The GPU-group actor: owns ``gpus_per_trial`` GPUs on one node and runs one trial at a time.

Created by the driver as ``ray.remote(GPUGroup).options(num_gpus=k, num_cpus=0,
max_concurrency=4)`` so ``status()`` and ``stop()`` answer while ``run_trial`` runs. Ray sets
``CUDA_VISIBLE_DEVICES`` for the actor; the server inherits it. Servers are plain children in the
actor's process group, which Ray's per-worker process-group cleanup reaps if the actor dies.
"""

from __future__ import annotations

import os

from core.types import EngineSpec, TrialResult, TrialSpec
from workers.node import NodeInfo, probe_node
from workers.procs import sweep_orphans
from workers.trial import Phase, TrialRunner


def _assigned_gpu_ids() -> tuple[str, ...]:
    try:
        import ray

        ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
        return tuple(str(i) for i in ids)
    except Exception:  # not inside Ray
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return tuple(x for x in visible.split(",") if x)


def _normal_priority() -> None:
    """Run at niceness 0 where allowed: Ray starts workers at 15, and the servers and the benchmark
    client inherit it, so any other work on the node would starve them (a measurement 5-40% low, or
    none). A local cluster started by the tuner already starts workers at 0."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:  # not allowed to raise priority (no CAP_SYS_NICE): keep Ray's
        pass


class GPUGroup:
    """One GPU group (see module docstring). Methods are the actor's remote interface."""

    def __init__(self, engine: EngineSpec) -> None:
        _normal_priority()
        self.engine = engine
        self.node: NodeInfo = probe_node(engine)
        self.gpu_ids = _assigned_gpu_ids()
        self.runner = TrialRunner(self.node.table, self.node.host, self.gpu_ids,
                                  sweep_process_group=os.getpgid(0) == os.getpid())

    def info(self) -> tuple[NodeInfo, tuple[str, ...], int]:
        """(node info, GPU ids, actor PID)."""
        return self.node, self.gpu_ids, os.getpid()

    def ray_node_id(self) -> str:
        """The Ray node this group lives on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def run_trial(self, spec: TrialSpec) -> TrialResult:
        """Run one trial (see workers.trial.TrialRunner.run)."""
        return self.runner.run(spec)

    def status(self) -> Phase:
        """The current trial and phase."""
        return self.runner.phase

    def stop(self) -> None:
        """Interrupt the running trial and kill its server."""
        self.runner.interrupt()

    def __ray_shutdown__(self) -> None:
        self.runner.interrupt()
        sweep_orphans()
