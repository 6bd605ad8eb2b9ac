"""What a node offers a sweep: its SGLang version and flag table, its GPUs, its host name.

For the real engine the flag table is introspected from the SGLang importable by the configured
Python on this node (falling back to the bundled table of a pinned version); for the simulated
engine it is the bundled table of the scenario's SGLang version and the GPUs the scenario models.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from core.flags import FlagTable, table_for
from core.types import EngineKind, EngineSpec
from workers.gpus import GpuInfo, detect_gpus


@dataclass(frozen=True)
class NodeInfo:
    """A node's software and hardware as a sweep sees it."""

    host: str
    sglang_version: str
    table: FlagTable
    gpu: GpuInfo | None
    time_scale: float = 1.0


def probe_node(engine: EngineSpec) -> NodeInfo:
    """Inspect this node for ``engine`` (ConfigError if SGLang cannot be introspected nor pinned)."""
    host = socket.gethostname()
    if engine.kind == EngineKind.SIM:
        from workers.sim.scenario import load_scenario

        assert engine.scenario is not None
        scenario = load_scenario(engine.scenario)
        g = scenario.gpu
        gpu = GpuInfo(name=f"{g.name} (simulated)", arch=g.arch, count=g.count, driver=g.driver,
                      memory_gb=g.memory_gb)
        table = FlagTable.bundled(scenario.sglang_version)
        return NodeInfo(host=host, sglang_version=table.version, table=table, gpu=gpu,
                        time_scale=scenario.time_scale)
    table = table_for(engine.python, engine.sglang_version)
    return NodeInfo(host=host, sglang_version=table.version, table=table, gpu=detect_gpus())
