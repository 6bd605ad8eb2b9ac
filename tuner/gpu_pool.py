"""Which GPU groups (slots) a trial runs on: one group, or with searched parallel sizes a block of
several groups of one node.

Every slot holds the same number of GPUs (:func:`tuner.parallelism.slot_gpus`). A trial that needs
``k`` slots gets an *aligned* block of one node: slots ``[j*k, (j+1)*k)`` in the node's GPU order, as
a buddy allocator hands out memory, so a 4-GPU trial takes GPUs 0-3 or 4-7 (one NVLink/NUMA half on
common 8-GPU boxes), never 2-5, and the free GPUs stay in blocks larger trials can use. Among free
blocks it prefers one whose slots loaded the same checkpoint last (page cache), then the one in the
busiest enclosing block (best fit: the large free blocks stay whole).

Trials of several sizes share the groups by *EASY backfilling*, as HPC batch schedulers do: the oldest
trial waiting for a block reserves the block that frees up first (by the running trials' expected
ends); a smaller trial may start before it only outside that block, or when it is expected to end
before the reservation starts. So GPUs do not idle while something fits, and the big trial is not
starved. Durations are expected from the finished trials of the same size (else of any size).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any

from core.errors import ClusterError
from tuner.launchers.base import Slot


def _gpu_order(slot: Slot) -> tuple[int, str]:
    first = slot.gpu_ids[0] if slot.gpu_ids else ""
    return (int(first), "") if first.isdigit() else (1 << 30, first)


class GpuPool:
    """The slots of a sweep and which of them are idle."""

    def __init__(self, slots: Iterable[Slot]) -> None:
        self.slots = list(slots)
        self.idle = list(self.slots)
        self.warm: dict[int, Any] = {}  # slot index -> the checkpoint it loaded last
        self.nodes: dict[str, list[Slot]] = {}
        for slot in sorted(self.slots, key=_gpu_order):
            self.nodes.setdefault(slot.detail or slot.host, []).append(slot)

    def check_fits(self, slots_needed: int) -> None:
        """ClusterError when no node has ``slots_needed`` slots (such a trial could never run)."""
        largest = max((len(s) for s in self.nodes.values()), default=0)
        if slots_needed > largest:
            raise ClusterError(f"a configuration needs {slots_needed} GPU group(s) on one node; the largest node "
                               f"has {largest}")

    def take(self, checkpoint: Any, slots_needed: int = 1,
             allowed: Callable[[tuple[Slot, ...]], bool] | None = None) -> tuple[Slot, ...] | None:
        """An aligned block of ``slots_needed`` idle slots of one node (see the module docstring) that
        ``allowed`` accepts, now busy; None when there is none."""
        free = {s.index for s in self.idle}
        blocks: list[tuple[bool, int, int, tuple[Slot, ...]]] = []
        for node in self.nodes.values():
            for start in range(0, len(node) - slots_needed + 1, slots_needed):
                block = tuple(node[start:start + slots_needed])
                if all(s.index in free for s in block) and (allowed is None or allowed(block)):
                    warm = checkpoint is not None and all(self.warm.get(s.index) == checkpoint for s in block)
                    outer = node[start - start % (2 * slots_needed):][:2 * slots_needed]
                    blocks.append((not warm, sum(s.index in free for s in outer), len(blocks), block))
        if not blocks:
            return None
        chosen = min(blocks)[3]
        for slot in chosen:
            self.idle.remove(slot)
            self.warm[slot.index] = checkpoint
        return chosen

    def release(self, slots: Iterable[Slot]) -> None:
        """The slots of a finished trial are idle again."""
        self.idle.extend(slots)

    def blocks(self, slots_needed: int) -> list[tuple[Slot, ...]]:
        """Every aligned block of ``slots_needed`` slots of one node, idle or not."""
        return [tuple(node[i:i + slots_needed]) for node in self.nodes.values()
                for i in range(0, len(node) - slots_needed + 1, slots_needed)]


class Durations:
    """How long trials hold their GPUs, by size, to expect when running ones end (see module docstring)."""

    def __init__(self) -> None:
        self.seen: dict[int, list[float]] = {}

    def add(self, slots_needed: int, seconds: float) -> None:
        """A finished trial of that size held its slots this long."""
        self.seen.setdefault(slots_needed, []).append(seconds)

    def expect(self, slots_needed: int) -> float | None:
        """The median of that size, else of every size; None before any trial finished."""
        values = self.seen.get(slots_needed) or [v for vs in self.seen.values() for v in vs]
        return statistics.median(values) if values else None


def reservation(pool: GpuPool, slots_needed: int, ends: dict[int, float], now: float) -> tuple[set[int], float]:
    """The block a waiting trial of ``slots_needed`` slots reserves (the slot indices) and when it frees
    up; ``ends``: the expected end of each busy slot."""
    best: tuple[float, tuple[Slot, ...]] | None = None
    for block in pool.blocks(slots_needed):
        free_at = max([now, *(ends.get(s.index, now) for s in block)])
        if best is None or free_at < best[0]:
            best = (free_at, block)
    if best is None:
        return set(), now
    return {s.index for s in best[1]}, best[0]


def may_backfill(block: tuple[Slot, ...], reserved: set[int], starts_at: float, now: float,
                 expected_s: float | None) -> bool:
    """May a trial start on ``block`` ahead of the waiting one that reserved ``reserved`` from
    ``starts_at``: outside the reservation, or expected to end before it starts."""
    if not reserved & {s.index for s in block}:
        return True
    return expected_s is not None and now + expected_s <= starts_at
