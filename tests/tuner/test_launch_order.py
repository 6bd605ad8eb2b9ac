"""Where a trial runs: the idle GPU group that loaded its checkpoint last (page cache), and with
searched parallel sizes an aligned block of one node's groups, shared by EASY backfilling."""

from __future__ import annotations

import pytest

from core.errors import ClusterError
from tuner.gpu_pool import GpuPool, may_backfill, reservation
from tuner.launchers.base import Slot


def _slots(n: int, node: str = "a", first: int = 0) -> list[Slot]:
    return [Slot(first + i, "h", (str(i),), node) for i in range(n)]


def _indices(block: tuple[Slot, ...] | None) -> list[int]:
    assert block is not None
    return [s.index for s in block]


def test_a_configuration_goes_where_its_checkpoint_was_loaded_last() -> None:
    pool = GpuPool(_slots(3))
    nvfp4, mxfp4 = pool.take("/m/nvfp4"), pool.take("/m/mxfp4")
    assert nvfp4 is not None and mxfp4 is not None
    pool.release([*mxfp4, *nvfp4])  # both came back; the third group is still idle and cold
    assert pool.take("/m/mxfp4") == mxfp4
    assert pool.take("/m/nvfp4") == nvfp4
    cold = pool.take("/m/fp8")  # nothing warm for it: the free one
    assert cold is not None and cold[0] not in (*nvfp4, *mxfp4)
    assert pool.take("/m/fp8") is None and not pool.idle


def test_blocks_are_aligned_and_small_trials_leave_large_blocks_whole() -> None:
    pool = GpuPool(_slots(8))
    assert _indices(pool.take(None, 1)) == [0]
    assert _indices(pool.take(None, 2)) == [2, 3]  # beside the busy one (best fit), not 1-2
    assert _indices(pool.take(None, 1)) == [1]  # fills the hole
    assert _indices(pool.take(None, 4)) == [4, 5, 6, 7]  # the other half stayed whole
    assert pool.take(None, 1) is None


def test_a_block_never_spans_two_nodes() -> None:
    pool = GpuPool([*_slots(2, "node-a"), *_slots(2, "node-b", first=2)])
    assert _indices(pool.take(None, 1)) == [0]
    assert pool.take(None, 4) is None  # four groups exist, but not on one node
    assert _indices(pool.take(None, 2)) == [2, 3]
    with pytest.raises(ClusterError, match="needs 4 GPU group.s. on one node; the largest node has 2"):
        pool.check_fits(4)


def test_backfilling_never_delays_the_waiting_trial() -> None:
    pool = GpuPool(_slots(8))
    running = pool.take(None, 4)  # GPUs 0-3 busy until t=100
    assert running is not None
    ends = {s.index: 100.0 for s in running}
    reserved, starts_at = reservation(pool, 8, ends, now=10.0)  # an 8-GPU trial waits for the whole node
    assert reserved == set(range(8)) and starts_at == 100.0
    block = (pool.slots[4],)
    assert may_backfill(block, reserved, starts_at, now=10.0, expected_s=60.0)  # ends at 70: before
    assert not may_backfill(block, reserved, starts_at, now=10.0, expected_s=120.0)  # would delay it
    assert not may_backfill(block, reserved, starts_at, now=10.0, expected_s=None)  # unknown: no
    reserved4, starts4 = reservation(pool, 4, ends, now=10.0)  # a 4-GPU one reserves the free half
    assert reserved4 == {4, 5, 6, 7} and starts4 == 10.0
    assert may_backfill((pool.slots[0],), reserved4, starts4, now=10.0, expected_s=None)  # outside it
