"""Launchers: what runs a TrialSpec and hands back a TrialResult for the sweep loop.

* :class:`~tuner.launchers.ray_groups.RayLauncher` - GPU-group actors on a Ray cluster (real or
  simulated servers).
* :class:`~tuner.launchers.offline.OfflineLauncher` - the scenario's offline model: no Ray, no
  processes, results on a virtual clock.

Both implement :class:`~tuner.launchers.base.Launcher`; the loop (:mod:`tuner.study`) sees nothing else.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.launchers.base import Launcher
    from tuner.space import SearchSpace
    from tuner.sweep_state import SweepOptions


def launcher_for(space: SearchSpace, opts: SweepOptions) -> Launcher:
    """The offline model with ``--offline``, else GPU groups on Ray."""
    from tuner.parallelism import gpu_sizes, slot_gpus

    engine = space.engine(opts.sglang_python)
    group_gpus = slot_gpus(gpu_sizes(space))  # gpus_per_trial, or less when the space searches parallel sizes
    if opts.offline:
        from tuner.launchers.offline import OfflineLauncher

        return OfflineLauncher(engine, group_gpus, gpus=opts.gpus, max_groups=opts.max_groups,
                               seed=opts.seed)
    from tuner.launchers.ray_groups import RayLauncher

    return RayLauncher(engine, group_gpus, address=opts.address, gpus=opts.gpus,
                       max_groups=opts.max_groups)
