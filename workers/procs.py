"""Process-tree helpers: stop processes by PID (never by name)."""

from __future__ import annotations

import contextlib
import os

import psutil


def terminate_all(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM every process, wait up to ``grace_s``, SIGKILL the rest and reap them."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


def sweep_orphans() -> list[int]:
    """Kill orphans (re-parented to init) in our own process group, only if we lead that group.

    Ray workers lead their own group, so this reaches only what this worker started.
    """
    me = os.getpid()
    if os.getpgid(0) != me:
        return []
    killed = []
    for p in psutil.process_iter(["pid", "ppid"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if p.pid != me and os.getpgid(p.pid) == me and p.info["ppid"] in (0, 1):
                p.kill()
                killed.append(p.pid)
    return killed
