"""Run one trial end to end on this node: render -> start -> ready -> gate -> benchmark -> stop.

:class:`TrialRunner` is what the GPU-group actor wraps; it has no Ray in it, so tests drive it
directly. Every outcome is a :class:`~core.types.TrialResult`; nothing raises out of ``run``
except programming errors. ``interrupt()`` (from another thread) stops the server at once and
makes the result ``interrupted``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import BenchmarkError, FlagError, ServerError
from core.flags import FlagTable, ran_otherwise
from core.redact import scrub, secret_values
from core.render import render
from core.types import BenchConfig, BenchResult, FailureKind, GateResult, KernelProfile, TrialResult, TrialSpec
from workers.bench import run_benchmark
from workers.failures import classify, reason_line
from workers.gate import run_gate
from workers.gpus import wait_gpus_released
from workers.profile import profile_decode
from workers.server import ServerProcess, free_port

PROFILE_TIMEOUT_S = 120.0  # load under the profiler until its trace is written, at most this long


@dataclass(frozen=True)
class Phase:
    """What a runner is doing: trial number (None when idle), phase name, since when (epoch s)."""

    trial_number: int | None
    phase: str
    since: float


def model_vocab_size(flags: dict[str, Any]) -> int | None:
    """The vocabulary size in the model's ``config.json`` (``vocab_size``, or its ``text_config``'s),
    where the model path is a local folder; None otherwise (a hub id, no file, no key)."""
    path = Path(str(flags.get("model_path") or "")) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for section in (config, config.get("text_config") or {}):
        size = section.get("vocab_size") if isinstance(section, dict) else None
        if isinstance(size, int) and size > 0:
            return size
    return None


class TrialRunner:
    """Runs trials one at a time for one GPU group on this node."""

    def __init__(self, table: FlagTable, node: str, gpu_ids: tuple[str, ...], *,
                 sweep_process_group: bool = False) -> None:
        self.table = table
        self.node = node
        self.gpu_ids = gpu_ids
        self.sweep_process_group = sweep_process_group
        self._lock = threading.Lock()
        self._server: ServerProcess | None = None
        self._interrupted = False
        self.phase = Phase(None, "idle", time.time())

    def _set_phase(self, trial: int | None, phase: str) -> None:
        self.phase = Phase(trial, phase, time.time())

    def interrupt(self) -> None:
        """Stop the running trial's server now (idempotent; safe from another thread)."""
        with self._lock:
            self._interrupted = True
            server = self._server
        if server is not None:
            server.stop(grace_s=5.0)

    def run(self, spec: TrialSpec, on_phase: Callable[[str], None] | None = None) -> TrialResult:
        """Run one trial; always returns a TrialResult."""
        def phase(name: str) -> None:
            self._set_phase(spec.trial_number, name)
            if on_phase is not None:
                on_phase(name)

        started = time.time()
        with self._lock:
            self._interrupted = False

        def result(**fields: Any) -> TrialResult:
            return TrialResult(trial_number=spec.trial_number, config_key=spec.config.key(),
                               sglang_version=self.table.version, node=self.node,
                               gpu_ids=spec.gpu_ids or self.gpu_ids,
                               started_at=started, finished_at=time.time(), **fields)

        port = free_port()
        try:
            cmd = render(spec.config, self.table, spec.engine, host="127.0.0.1", port=port)
        except FlagError as exc:
            return result(argv=(), env=dict(spec.config.env), failure_kind=FailureKind.BAD_FLAG,
                          failure_reason=str(exc))
        server = ServerProcess(cmd, Path(spec.log_dir) / f"trial-{spec.trial_number:04d}.log",
                               url=f"http://127.0.0.1:{port}", sweep_process_group=self.sweep_process_group,
                               api_key=_api_key(spec), visible_gpus=spec.gpu_ids)
        try:
            out = self._measure(spec, server, phase)
        finally:
            phase("stopping")
            pids = {p.pid for p in server.tree()}
            server.stop()
            wait_gpus_released(pids)
            with self._lock:
                self._server = None
                interrupted = self._interrupted
            self._set_phase(None, "idle")
        if interrupted:
            out.kind, out.reason, out.bench = FailureKind.INTERRUPTED, "interrupted by the driver", None
        secrets = secret_values(cmd.argv, cmd.env, spec.config.flags)
        log = scrub(server.read_log(), secrets)
        if secrets:  # the log file on disk must not keep them either
            server.log_path.write_text(log)
        return result(argv=cmd.argv, env=dict(cmd.env), startup_s=out.startup_s, bench=out.bench, gate=out.gate,
                      failure_kind=out.kind, failure_reason=scrub(out.reason, secrets),
                      log_tail=scrub(out.tail or (server.log_tail() if out.kind else ""), secrets), server_log=log,
                      profile=out.profile, profile_error=out.profile_error, curve=tuple(out.curve),
                      ran_as=out.ran_as)

    def _measure(self, spec: TrialSpec, server: ServerProcess, phase: Callable[[str], None]) -> _Outcome:
        """Start the server, wait until ready, gate, benchmark; every failure becomes a kind + reason."""
        out = _Outcome()
        try:
            phase("launching")
            with self._lock:
                if self._interrupted:
                    return out
                self._server = server
                server.start()
            out.startup_s = server.wait_ready(spec.startup_timeout_s)
            out.ran_as = ran_otherwise(spec.config.flags, server.server_info())
            api_key = _api_key(spec)
            if spec.gate.enabled:
                phase("gate")
                flags = spec.config.flags
                out.gate = asyncio.run(run_gate(server.url, spec.gate,
                                                dummy_weights=flags.get("load_format") == "dummy",
                                                no_tokenizer=bool(flags.get("skip_tokenizer_init")),
                                                api_key=api_key))
                if not out.gate.passed:
                    out.kind = FailureKind.GATE_FAILED
                    out.reason = f"correctness gate failed: {out.gate.summary()}"
                    return out
            vocab = spec.bench.vocab_size or model_vocab_size(spec.config.flags)
            bench = dataclasses.replace(spec.bench, vocab_size=vocab)
            out.bench = asyncio.run(run_benchmark(server.url, bench, on_phase=phase,
                                                  should_stop=lambda: self._interrupted or not server.alive(),
                                                  api_key=api_key))
            if not server.alive():
                raise BenchmarkError(f"server exited (code {server.exit_code()}) during the benchmark")
            if spec.profile_steps > 0:
                phase("profiling")
                self._profile(spec, server, bench, out)
            for concurrency in spec.more_concurrencies:  # a failed one ends the curve, not the trial
                phase(f"measuring at C{concurrency}")
                at_c = dataclasses.replace(bench, concurrency=concurrency)
                try:
                    out.curve.append(asyncio.run(run_benchmark(server.url, at_c, api_key=api_key,
                                                               should_stop=lambda: self._interrupted)))
                except BenchmarkError:
                    break
        except OSError as exc:  # the configured Python cannot even be started on this node
            out.kind = FailureKind.INFRASTRUCTURE
            out.reason = f"cannot start {server.cmd.argv[0]}: {exc.strerror or exc}"
        except ServerError as exc:
            out.kind, out.reason, out.tail = exc.kind, str(exc), exc.log_tail
        except BenchmarkError as exc:
            out.bench = None
            if server.alive():
                out.kind, out.reason = FailureKind.BENCHMARK_FAILED, str(exc)
            else:
                log = server.read_log(200_000)
                out.kind = classify(server.exit_code(), log)
                out.reason = f"server died during the benchmark (exit {server.exit_code()}): {reason_line(log)}"
        return out

    def _profile(self, spec: TrialSpec, server: ServerProcess, bench: BenchConfig, out: _Outcome) -> None:
        """Profile the server's decode under the benchmark's load; a failure is noted, not fatal."""
        where = Path(spec.log_dir) / f"trial-{spec.trial_number:04d}-profile"
        try:
            out.profile = asyncio.run(profile_decode(server.url, bench, where, spec.profile_steps,
                                                     PROFILE_TIMEOUT_S, api_key=_api_key(spec)))
        except BenchmarkError as exc:
            out.profile_error = str(exc)


@dataclass
class _Outcome:
    """What one attempt produced so far (mutable while the trial runs)."""

    startup_s: float | None = None
    gate: GateResult | None = None
    bench: BenchResult | None = None
    kind: FailureKind | None = None
    reason: str = ""
    tail: str = ""
    profile: KernelProfile | None = None
    profile_error: str = ""
    curve: list[BenchResult] = dataclasses.field(default_factory=list)
    ran_as: dict[str, Any] = dataclasses.field(default_factory=dict)


def _api_key(spec: TrialSpec) -> str | None:
    """The server's --api-key, which readiness, gate and benchmark must present."""
    key = spec.config.flags.get("api_key")
    return str(key) if key else None
