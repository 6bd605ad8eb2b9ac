"""What GPUs a node has, and whether our processes still hold them (``nvidia-smi``; absent = no GPU)."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass

import psutil

from core.hardware import arch_from_capability


@dataclass(frozen=True)
class GpuInfo:
    """The GPUs of one node (model of GPU 0; count of all)."""

    name: str
    arch: str | None
    count: int
    driver: str
    memory_gb: float


def _smi(*query: str) -> list[list[str]] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def detect_gpus() -> GpuInfo | None:
    """This node's NVIDIA GPUs, or None without nvidia-smi."""
    rows = _smi("--query-gpu=name,compute_cap,driver_version,memory.total")
    if not rows:
        return None
    name, cap, driver, mem = (rows[0] + ["", "", "", ""])[:4]
    try:  # older drivers print "[N/A]" or "[Not Supported]" for fields they cannot query
        arch: str | None = arch_from_capability(cap)
    except ValueError:
        arch = None
    try:
        memory_gb = round(float(mem) / 1024, 1)
    except ValueError:
        memory_gb = 0.0
    return GpuInfo(name=name, arch=arch, count=len(rows), driver=driver, memory_gb=memory_gb)


def gpu_pids() -> set[int] | None:
    """PIDs of processes using any GPU of this node, or None when that cannot be known."""
    rows = _smi("--query-compute-apps=pid")
    if rows is None:
        return None
    return {int(r[0]) for r in rows if r and r[0].isdigit()}


def wait_gpus_released(pids: set[int], timeout_s: float = 60.0, poll_s: float = 0.5) -> bool:
    """Wait until none of ``pids`` runs and none holds a GPU; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = {p for p in pids if _running(p)}
        holding = gpu_pids()
        if not alive and not (holding and holding & pids):
            return True
        time.sleep(poll_s)
    return False


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a process may exit while we look)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
