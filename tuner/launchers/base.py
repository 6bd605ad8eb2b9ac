"""The launcher seam of the sweep loop (contract in docs/architecture.md).

A launcher owns *slots* (GPU groups). The loop submits one :class:`~core.types.TrialSpec` to an
idle slot, then collects :class:`Finished` results with :meth:`Launcher.wait`. Every submitted trial
comes back exactly once, as a result: failures of the launcher's own machinery are results of kind
``infrastructure``, never exceptions, except :class:`~core.errors.ClusterError` when the launcher
can run nothing at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from core.types import EngineSpec, TrialResult, TrialSpec
from workers.node import NodeInfo
from workers.trial import Phase


@dataclass(frozen=True)
class Slot:
    """One place a trial runs: a GPU group on a host."""

    index: int
    host: str
    gpu_ids: tuple[str, ...]
    detail: str = ""  # where it is, e.g. "Ray node 1a2b3c4d5e6f"

    @property
    def label(self) -> str:
        """How the live view names the slot."""
        return f"{self.index} {self.host} gpu {','.join(self.gpu_ids)}"


@dataclass(frozen=True)
class Finished:
    """A submitted trial that came back, and the slot it ran on (idle again)."""

    slot: int
    result: TrialResult


class Launcher(Protocol):
    """Runs trials on slots; see the module docstring for the contract."""

    engine: EngineSpec
    # whether trials start processes (Ray, servers) that a watchdog must clean up if the driver is killed
    starts_processes: bool

    def start(self) -> tuple[NodeInfo, list[Slot]]:
        """Bring the slots up (ClusterError if none can be); the node the trials run on, and the slots."""
        ...

    def submit(self, slot: int, spec: TrialSpec) -> None:
        """Start ``spec`` on an idle slot; returns at once."""
        ...

    def wait(self, timeout_s: float) -> list[Finished]:
        """Results that are ready, waiting up to ``timeout_s`` for the first one ([] on timeout)."""
        ...

    def now(self) -> float:
        """The clock trials are timed by (epoch seconds; the offline launcher's is virtual)."""
        ...

    def phases(self) -> dict[int, Phase]:
        """What each busy slot is doing now (best effort, may be empty)."""
        ...

    def stop_all(self) -> None:
        """Interrupt every trial in flight; their results still come back through :meth:`wait`."""
        ...

    def close(self) -> None:
        """Release everything (idempotent)."""
        ...
