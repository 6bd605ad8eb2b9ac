"""Launchers: what runs a TrialSpec and hands back a TrialResult for the sweep loop.

* :class:`~tuner.launchers.ray_groups.RayLauncher` - GPU-group actors on a Ray cluster (real or
  simulated servers).
* :class:`~tuner.launchers.offline.OfflineLauncher` - the scenario's offline model: no Ray, no
  processes, results on a virtual clock.

Both implement :class:`~tuner.launchers.base.Launcher`; the loop (:mod:`tuner.study`) sees nothing else.
"""
