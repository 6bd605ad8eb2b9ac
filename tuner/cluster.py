"""Ray for the sweep: connect (embedded local instance by default, or ``--address``) and create
one GPU-group actor per ``gpus_per_trial`` GPUs the cluster has.

Without GPUs (the simulated engine on a laptop or in CI) the local instance is given fake GPU
resources: ``gpus`` (the launcher passes ``--gpus N`` or the scenario's GPU count). Ray sets
CUDA_VISIBLE_DEVICES to fake ids, which the simulated engine ignores.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from core.errors import ClusterError
from core.types import EngineSpec
from workers.gpu_group import GPUGroup
from workers.node import NodeInfo

OBJECT_STORE_BYTES = 128 * 1024 * 1024
ACTOR_READY_TIMEOUT_S = 180.0
WAITING_NOTICE_S = 10.0  # on a shared cluster, say the sweep waits for GPUs after this long
OTHER_GROUPS_GRACE_S = 30.0  # ... and once one group is up, give the others this long (an actor probing
# its node takes seconds on a busy machine: 5 s dropped a free node of a two-node cluster under load)
REACH_TIMEOUT_S = 10.0  # Ray itself retries an unreachable address for minutes


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS
HTTP2_SETTINGS_FRAME_TYPE = 0x04


def _notify(line: str) -> None:
    """A line for the user before the sweep's view exists (a submitted sweep's job log)."""
    print(line, file=sys.stderr, flush=True)


def check_reachable(address: str) -> None:
    """ClusterError in seconds, not minutes, when ``address`` (Ray's ``HOST:PORT`` or ``ray://HOST:PORT``;
    ``auto`` is left to Ray) is malformed, nothing listens there, or what listens does not speak gRPC
    (Ray waits forever on, say, a web server)."""
    if address in ("auto", "local"):
        return
    if address.startswith(("http://", "https://")):
        raise ClusterError(f"--address {address}: that is a dashboard URL; a sweep joins the cluster's GCS "
                           "address, HOST:6379 as `ray start --head` printed it")
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(f"--address {address}: expected HOST:PORT (e.g. 10.0.0.1:6379) or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S) as conn:
            conn.sendall(HTTP2_PREFACE)
            reply = conn.recv(9)
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ClusterError(f"--address {address}: cannot reach a Ray cluster there ({why}); is `ray start "
                           "--head` running on that host, and is this its address?") from exc
    if len(reply) < 4 or reply[3] != HTTP2_SETTINGS_FRAME_TYPE:
        raise ClusterError(f"--address {address}: something listens there, but not a Ray cluster (it does not "
                           "speak gRPC); the address is the one `ray start --head` printed, usually HOST:6379")


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Keep the driver's SIGINT/SIGTERM handlers: ``ray.init`` installs its own SIGTERM handler
    (``sys.exit``), which would skip stopping the servers and recording the trials in flight."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _stderr_kept_from_the_user() -> Iterator[Callable[[], str]]:
    """Send this process's stderr (the file descriptor, where Ray's C++ core writes) to a temporary
    file while the block runs; yields a function that reads what was written."""
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)

        def said() -> str:
            sink.seek(0)
            return sink.read().decode(errors="replace")

        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@dataclass
class Group:
    """A live GPU-group actor and what it reported at start."""

    index: int
    actor: Any
    node: NodeInfo
    gpu_ids: tuple[str, ...]
    pid: int
    ray_node: str = ""


class Cluster:
    """The Ray side of a sweep: the connection and the GPU-group actors."""

    def __init__(self, engine: EngineSpec, gpus_per_trial: int, *, address: str | None = None,
                 gpus: int | None = None, max_groups: int | None = None) -> None:
        self.engine = engine
        self.gpus_per_trial = gpus_per_trial
        self.address = address
        self.gpus = gpus
        self.max_groups = max_groups
        self.groups: list[Group] = []
        self._owns_ray = False

    def connect(self) -> None:
        """Start or join Ray."""
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            return
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                                  "log_to_driver": False}
        with _signal_handlers_kept():
            self._init(ray, kwargs)

    def _init(self, ray: Any, kwargs: dict[str, Any]) -> None:
        try:
            if self.address:
                with _stderr_kept_from_the_user() as said:  # Ray's C++ retries print a line a second
                    try:
                        ray.init(address=self.address, **kwargs)
                    except (ConnectionError, RuntimeError, ValueError) as exc:
                        last = [line for line in said().splitlines() if "] " in line][-1:]
                        raise ConnectionError(f"{exc}{' (' + last[0].split('] ', 1)[1] + ')' if last else ''}") from exc
            else:
                # worker_niceness 0: servers and the benchmark client run at normal priority (Ray's 15
                # lets any other work on the machine starve them)
                ray.init(address="local", num_gpus=self.gpus, num_cpus=max(2, os.cpu_count() or 2),
                         object_store_memory=OBJECT_STORE_BYTES, _system_config={"worker_niceness": 0}, **kwargs)
                self._owns_ray = True
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(f"cannot start or join Ray{' at ' + self.address if self.address else ''}: "
                               f"{exc}") from exc

    def start_groups(self) -> list[Group]:
        """Create as many GPU-group actors as the cluster's GPUs allow and wait until they are up."""
        import ray

        total = int(ray.cluster_resources().get("GPU", 0))  # type: ignore[no-untyped-call]
        count = total // self.gpus_per_trial
        if self.max_groups:
            count = min(count, self.max_groups)
        if count == 0:
            raise ClusterError(f"the Ray cluster has {total} GPU(s); a trial needs gpus_per_trial="
                               f"{self.gpus_per_trial} (use --gpus N for simulated GPUs)")
        remote: Any = ray.remote(GPUGroup).options(num_gpus=self.gpus_per_trial, num_cpus=0, max_concurrency=4,
                                                   max_restarts=0, scheduling_strategy="SPREAD")
        actors: list[Any] = [remote.remote(self.engine) for _ in range(count)]
        refs = [a.info.remote() for a in actors]
        if self.address:  # a shared cluster: other sweeps may hold the GPUs
            actors, refs = self._wait_for_gpus(actors, refs)
        try:
            infos = ray.get(refs, timeout=ACTOR_READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as exc:
            raise ClusterError(f"GPU-group actors not ready after {ACTOR_READY_TIMEOUT_S:g} s") from exc
        except ray.exceptions.RayActorError as exc:
            lines = str(exc).strip().splitlines()
            cause = lines[-1] if lines else str(exc)
            raise ClusterError(f"a GPU-group actor failed to start: {cause.split('Error: ', 1)[-1]}") from exc
        nodes = ray.get([a.ray_node_id.remote() for a in actors], timeout=ACTOR_READY_TIMEOUT_S)
        self.groups = [Group(i, a, node, ids, pid, ray_node)
                       for i, (a, (node, ids, pid), ray_node) in enumerate(zip(actors, infos, nodes, strict=True))]
        return self.groups

    def _wait_for_gpus(self, actors: list[Any], refs: list[Any]) -> tuple[list[Any], list[Any]]:
        """The actors that got their GPUs, with their ``info`` calls (``refs``): wait (without limit) for
        the first, then briefly for the rest; the ones still waiting are ended, so this sweep holds no
        place in Ray's queue it does not use."""
        import ray

        ready, _ = ray.wait(refs, num_returns=1, timeout=WAITING_NOTICE_S)
        if not ready:
            _notify(f"waiting for GPUs: the cluster's GPUs are in use by other work; this sweep starts when "
                    f"{self.gpus_per_trial} are free")
            ray.wait(refs, num_returns=1)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=OTHER_GROUPS_GRACE_S)
        for actor, ref in zip(actors, refs, strict=True):
            if ref not in ready:
                ray.kill(actor)
        if len(ready) < len(refs):
            _notify(f"{len(ready)} of {len(refs)} GPU group(s): the other GPUs are in use by other work")
        kept = [(a, r) for a, r in zip(actors, refs, strict=True) if r in ready]
        return [a for a, _ in kept], [r for _, r in kept]

    def replace(self, group: Group) -> Group:
        """A new actor in place of a dead one (same index)."""
        import ray

        remote: Any = ray.remote(GPUGroup).options(num_gpus=self.gpus_per_trial, num_cpus=0, max_concurrency=4,
                                                   max_restarts=0)
        actor: Any = remote.remote(self.engine)
        node, ids, pid = ray.get(actor.info.remote(), timeout=ACTOR_READY_TIMEOUT_S)
        new = Group(group.index, actor, node, ids, pid, ray.get(actor.ray_node_id.remote()))
        self.groups[group.index] = new
        return new

    def stop_all(self, timeout_s: float = 30.0) -> None:
        """Interrupt every running trial (servers killed), then end the actors."""
        import ray

        refs = [g.actor.stop.remote() for g in self.groups]
        with contextlib.suppress(Exception):  # an actor may already be dead
            ray.get(refs, timeout=timeout_s)

    def shutdown(self) -> None:
        """Kill the actors (their __ray_shutdown__ stops servers) and leave Ray."""
        import ray

        if not ray.is_initialized():
            return
        for g in self.groups:
            with contextlib.suppress(Exception):
                g.actor.__ray_terminate__.remote()
        self.groups = []
        ray.shutdown()
