"""One inference-server process: launch, readiness, failure detection, teardown.

The server is a plain ``Popen`` child in the caller's process group (never ``setsid``: Ray's
per-worker process-group cleanup must be able to reap it) with ``PR_SET_PDEATHSIG`` so it gets
SIGTERM if its parent dies. ``stop()`` is idempotent: SIGTERM to the whole process tree, a grace
period, SIGKILL to what is left; optionally a sweep of orphans left in our own process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from core.errors import ServerStartError, ServerTimeoutError
from core.types import FailureKind, LaunchCommand
from workers.bench import auth_headers
from workers.failures import FATAL_LINES, classify, reason_line
from workers.procs import sweep_orphans, terminate_all

READY_LINE = "The server is fired up and ready to roll!"
PR_SET_PDEATHSIG = 1

try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not Linux
    _LIBC = None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


TREE_GRACE_S = 5.0  # after the main process had its chance, what is left gets this long


class ServerProcess:
    """A launched server. Use as a context manager or call ``stop()`` yourself."""

    def __init__(self, cmd: LaunchCommand, log_path: str | Path, *, url: str,
                 sweep_process_group: bool = False, api_key: str | None = None,
                 visible_gpus: tuple[str, ...] = ()) -> None:
        """``visible_gpus``: the GPUs the server may use (CUDA_VISIBLE_DEVICES) when they are more than
        the ones Ray gave this process (a trial spanning several GPU groups)."""
        self.cmd = cmd
        self.visible_gpus = visible_gpus
        self.headers = auth_headers(api_key)
        self.url = url
        self.log_path = Path(log_path)
        self.sweep_process_group = sweep_process_group
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self._log_offset = 0

    def start(self) -> None:
        """Spawn the server (stdout+stderr to the log file)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.cmd.env}
        if self.visible_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.visible_gpus)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(list(self.cmd.argv), env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        """The server's PID once started."""
        return self.proc.pid if self.proc else None

    def read_log(self, max_bytes: int = 2_000_000) -> str:
        """The log (its last ``max_bytes``)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log."""
        return "\n".join(self.read_log(200_000).splitlines()[-lines:])

    def read_new_lines(self) -> str:
        """The complete log lines written since the last call (a line still being written waits)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                chunk = f.read()
        except OSError:
            return ""
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written is read next time, whole
        self._log_offset += len(complete)
        return complete.decode(errors="replace")

    def _fail(self, exc_type: type[ServerStartError] | type[ServerTimeoutError], message: str,
              kind: FailureKind | None = None) -> None:
        code = self.proc.poll() if self.proc else None
        log = self.read_log(200_000)
        tail = self.log_tail()
        self.stop()
        raise exc_type(message, kind=kind or classify(code, log), log_tail=tail)

    def wait_ready(self, timeout_s: float, poll_s: float = 0.2) -> float:
        """Block until ``/ready`` (or ``/health_generate`` on old SGLang) answers 200; seconds taken.

        Raises ServerStartError (exit or fatal log line) or ServerTimeoutError, after stopping the server.
        """
        assert self.proc is not None, "start() first"
        deadline = self.started_at + timeout_s
        probe = "/ready"
        with httpx.Client(base_url=self.url, timeout=5.0, headers=self.headers) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self._fail(ServerStartError, f"server exited with code {code} during startup: "
                               f"{reason_line(self.read_log(200_000))}")
                if FATAL_LINES.search(self.read_new_lines()):
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))  # let it print the cause
                    self._fail(ServerStartError, f"server failed during startup: "
                               f"{reason_line(self.read_log(200_000))}")
                with contextlib.suppress(httpx.HTTPError):
                    asked = time.monotonic()
                    resp = client.get(probe)
                    if resp.status_code == 200:  # ready when asked: /health_generate's own generation
                        return asked - self.started_at  # (SGLang without /ready) is not startup time
                    if resp.status_code in (401, 403):
                        self._fail(ServerStartError, f"server answers {probe} with HTTP {resp.status_code}: "
                                   "it wants an API key the tuner was not given (set api_key in the space)",
                                   FailureKind.CONFIG_ERROR)
                    if resp.status_code == 404 and probe == "/ready":
                        probe = "/health_generate"  # SGLang before /ready existed
                if time.monotonic() > deadline:
                    self._fail(ServerTimeoutError, f"server not ready after {timeout_s:g} s "
                               f"(last log line: {reason_line(self.read_log(200_000))})",
                               FailureKind.STARTUP_TIMEOUT)
                time.sleep(poll_s)

    def server_info(self) -> dict[str, Any]:
        """The options the server runs with, as ``/server_info`` (``/get_server_info`` before 0.5.x's
        rename) reports them; {} when neither answers."""
        with httpx.Client(base_url=self.url, timeout=5.0, headers=self.headers) as client:
            for path in ("/server_info", "/get_server_info"):
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    resp = client.get(path)
                    if resp.status_code == 200 and isinstance(info := resp.json(), dict):
                        return info
        return {}

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        """The exit code once the server has exited."""
        return self.proc.poll() if self.proc else None

    def tree(self) -> list[psutil.Process]:
        """The server and all its descendants that are still alive."""
        if self.proc is None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the server (idempotent); returns when every process of its tree is gone.

        SIGTERM goes to the server's main process first, whose own handler stops its children (a tree
        signalled all at once makes SGLang log every normal stop as a crashed scheduler and wait 5 s
        for crash diagnostics); what is left after ``grace_s`` is terminated as a tree, then killed.
        """
        procs = self.tree()
        main = next((p for p in procs if self.proc is not None and p.pid == self.proc.pid), None)
        if main is not None:
            with contextlib.suppress(psutil.Error):
                main.terminate()
                main.wait(timeout=grace_s)
        terminate_all([p for p in procs if p.is_running()], TREE_GRACE_S)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        if self.sweep_process_group:
            sweep_orphans()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
