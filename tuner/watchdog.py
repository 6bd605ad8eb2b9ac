"""A watchdog that cleans up after the driver, however it ends (even ``kill -9``).

``tuner sweep`` starts ``python -m tuner.watchdog <driver-pid>`` in its own session with a pipe
on its stdin. Every second it snapshots the driver's descendants (Ray's processes, GPU-group
actors, inference servers) by PID and creation time. When the pipe closes - the driver exited or
was killed - it terminates every process of the last snapshot that still runs with the same PID
and creation time (SIGTERM, then SIGKILL after a grace period). Processes are addressed by PID
only, never by name.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

import psutil

from workers.procs import terminate_all

SNAPSHOT_INTERVAL_S = 1.0
GRACE_S = 3.0


def start_watchdog() -> subprocess.Popen[bytes]:
    """Start the watchdog for this process; keep the returned handle open until exit."""
    return subprocess.Popen([sys.executable, "-m", "tuner.watchdog", str(os.getpid())], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop_watchdog(handle: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    """Close the pipe (the watchdog sweeps leftovers and exits) and wait for it."""
    if handle.stdin is not None:
        with contextlib.suppress(OSError):
            handle.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        handle.wait(timeout=timeout_s)


def snapshot(pid: int) -> dict[int, float]:
    """{pid: create_time} of every descendant of ``pid``."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return {}
    out = {}
    me = os.getpid()
    for child in children:
        if child.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            out[child.pid] = child.create_time()
    return out


def terminate(known: dict[int, float]) -> int:
    """Stop the processes of ``known`` that still run as themselves; returns how many were found."""
    procs = []
    for pid, created in known.items():
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                procs.append(proc)
    terminate_all(procs, GRACE_S)
    return len(procs)


def main() -> None:
    """Watch the driver given as argv[1] until stdin closes, then clean up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    driver = int(sys.argv[1])
    known: dict[int, float] = {}
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], SNAPSHOT_INTERVAL_S)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break
        current = snapshot(driver)
        if current or psutil.pid_exists(driver):
            known.update(current)
            known = {p: t for p, t in known.items() if psutil.pid_exists(p)}
    time.sleep(0.2)
    terminate({**known, **snapshot(driver)})


if __name__ == "__main__":
    main()
