"""Frozen dataclasses that cross process and Ray boundaries. Nothing Ray- or Optuna-specific."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class FailureKind(StrEnum):
    """Why a trial produced no valid measurement. All but INFRASTRUCTURE/INTERRUPTED are the config's fault."""

    BAD_FLAG = "bad_flag"
    CONFIG_ERROR = "config_error"
    OOM = "oom"
    UNSUPPORTED = "unsupported"
    CUDA_GRAPH = "cuda_graph"
    NCCL = "nccl"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASHED = "crashed"
    GATE_FAILED = "gate_failed"
    BENCHMARK_FAILED = "benchmark_failed"
    SLO_MISSED = "slo_missed"  # measured, but outside a service-level objective (core.slo)
    INTERRUPTED = "interrupted"
    INFRASTRUCTURE = "infrastructure"

    @property
    def config_caused(self) -> bool:
        """True when the configuration itself is to blame (told to Optuna as infeasible)."""
        return self not in (FailureKind.INTERRUPTED, FailureKind.INFRASTRUCTURE)


class RunStatus(StrEnum):
    """What became of one trial of a sweep (the ``status`` of its record)."""

    OK = "ok"  # launched and measured
    INFEASIBLE = "infeasible"  # launched; the configuration failed (a FailureKind that is config_caused)
    FAILED = "failed"  # launched; the infrastructure failed (re-queued once)
    INTERRUPTED = "interrupted"  # stopped by the user or the driver (re-queued)
    CACHED = "cached"  # not launched: the same configuration was measured before
    AVOIDED = "avoided"  # not launched: a failure rule learned in this sweep covers it

    @property
    def launched(self) -> bool:
        """True when the run started a server and got a verdict (what the budget counts)."""
        return self in (RunStatus.OK, RunStatus.INFEASIBLE)


@dataclass(frozen=True)
class Config:
    """One point of a search space: sampled params, and the SGLang settings (dest names) + env they set."""

    params: dict[str, Any]
    flags: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)

    def key(self) -> str:
        """A stable hash of what is launched (flags + env): equal keys are the same server."""
        blob = json.dumps({"flags": self.flags, "env": self.env}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BenchConfig:
    """How to measure one server: closed loop with ``concurrency`` streams, warm-up, then windows."""

    concurrency: int = 16
    input_len: int = 1024
    output_len: int = 256
    warmup_s: float = 20.0
    duration_s: float = 60.0
    repeats: int = 1
    api: str = "generate"  # generate | completions
    request_timeout_s: float = 120.0
    max_failed_fraction: float = 0.05
    seed: int = 0
    early_stop_window_s: float | None = None
    early_stop_below_tok_s: float | None = None
    vocab_size: int | None = None  # prompt token ids are drawn below it (the model's config.json says)

    def prompt_id_range(self) -> tuple[int, int]:
        """[low, high) of the random prompt token ids: 1000..30000, inside the vocabulary when known."""
        high = min(30000, self.vocab_size) if self.vocab_size else 30000
        return min(1000, high // 10), max(high, 1)


@dataclass(frozen=True)
class GatePrompt:
    """A prompt sent greedily before the benchmark; ``expect`` substring or ``expect_regex`` must match."""

    text: str
    expect: str | None = None
    expect_regex: str | None = None
    max_new_tokens: int = 32


@dataclass(frozen=True)
class GateConfig:
    """The correctness gate: prompts to check; ``enabled=False`` skips it entirely."""

    prompts: tuple[GatePrompt, ...] = ()
    enabled: bool = True


@dataclass(frozen=True)
class GateCheck:
    """Evidence for one gate prompt."""

    prompt: str
    got: str
    expected: str | None
    ok: bool
    reason: str


@dataclass(frozen=True)
class GateResult:
    """Pass/fail of the gate with the evidence; ``semantic_skipped`` when the server runs dummy weights."""

    passed: bool
    checks: tuple[GateCheck, ...]
    semantic_skipped: bool = False

    def summary(self) -> str:
        """One line: the first failing check, or 'passed'."""
        for check in self.checks:
            if not check.ok:
                return f"{check.reason}: prompt {check.prompt!r} got {check.got[:80]!r}"
        return "passed" + (" (semantic checks skipped: dummy weights)" if self.semantic_skipped else "")


@dataclass(frozen=True)
class BenchResult:
    """The metrics of one benchmark run (see docs/metrics.md). ``tok_s`` is tok/s@C (median of windows)."""

    tok_s: float
    window_tok_s: tuple[float, ...]
    request_throughput: float
    per_user_tok_s: float
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    itl_ms: dict[str, float]
    e2e_ms: dict[str, float]
    completed: int
    failed: int
    output_tokens: int
    output_chunks: int
    achieved_concurrency: float
    concurrency: int
    held_concurrency: bool
    accept_length: float | None
    duration_s: float
    spread: float = 0.0
    errors: tuple[str, ...] = ()
    early_stopped: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every metric."""
        return asdict(self)


class Objective(StrEnum):
    """What a sweep maximizes: tok/s@C16 of one server, or that divided by the GPUs the server uses."""

    PER_SERVER = "per_server"
    PER_GPU = "per_gpu"


class EngineKind(StrEnum):
    """Which server program trials launch."""

    SGLANG = "sglang"  # python -m sglang.launch_server
    SIM = "sim"  # python -m workers.sim: the simulated engine, behaving as a scenario file says


@dataclass(frozen=True)
class EngineSpec:
    """Which server program to launch: real SGLang, or the simulated engine with a scenario file."""

    kind: EngineKind = EngineKind.SGLANG
    python: str = "python3"
    scenario: str | None = None
    sglang_version: str | None = None

    @property
    def module(self) -> str:
        """The module run with ``python -m``."""
        return "workers.sim" if self.kind == EngineKind.SIM else "sglang.launch_server"


@dataclass(frozen=True)
class KernelShare:
    """One GPU kernel's part of a profiled run: its name, share of kernel time, microseconds, calls."""

    name: str
    share: float
    total_us: float
    calls: int

    def short_name(self, width: int = 60) -> str:
        """The name without a C++ signature's return type and arguments, cut to ``width`` characters:
        ``void flashinfer::norm::FusedAddRMSNormKernel<8u, bf16>(bf16*, ...)`` -> ``flashinfer::norm::...``."""
        name = self.name.removeprefix("void ")
        if name.endswith(")"):  # drop the argument list: the parenthesis that closes at the end
            depth = 0
            for i in range(len(name) - 1, -1, -1):
                depth += {")": 1, "(": -1}.get(name[i], 0)
                if depth == 0:
                    name = name[:i] or name
                    break
        return name if len(name) <= width else name[: width - 3] + "..."


@dataclass(frozen=True)
class KernelProfile:
    """Where a profiled run's GPU time went: the top kernels by time share, from SGLang's trace file."""

    trace_path: str
    steps: int
    total_us: float
    kernel_count: int  # distinct kernel names in the trace
    kernels: tuple[KernelShare, ...]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelProfile:
        """The inverse of :meth:`as_dict`."""
        return cls(trace_path=str(data["trace_path"]), steps=int(data["steps"]), total_us=float(data["total_us"]),
                   kernel_count=int(data["kernel_count"]),
                   kernels=tuple(KernelShare(**k) for k in data["kernels"]))


@dataclass(frozen=True)
class TrialSpec:
    """Everything a GPU-group actor needs to run one trial."""

    trial_number: int
    config: Config
    engine: EngineSpec
    bench: BenchConfig
    gate: GateConfig
    startup_timeout_s: float = 900.0
    log_dir: str = "tuner-runs"
    profile_steps: int = 0  # > 0: after the benchmark, this many decode steps under SGLang's profiler
    gpu_ids: tuple[str, ...] = ()  # the trial's GPUs when it spans several groups (else the group's own)
    more_concurrencies: tuple[int, ...] = ()  # after the benchmark, measure at each of these too


@dataclass(frozen=True)
class LaunchCommand:
    """The exact argv and extra environment of one server launch."""

    argv: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True)
class TrialResult:
    """What a trial produced: metrics or a failure kind with the log lines that explain it."""

    trial_number: int
    config_key: str
    argv: tuple[str, ...]
    env: dict[str, str]
    sglang_version: str
    node: str
    gpu_ids: tuple[str, ...]
    started_at: float
    finished_at: float
    startup_s: float | None = None
    bench: BenchResult | None = None
    gate: GateResult | None = None
    failure_kind: FailureKind | None = None
    failure_reason: str = ""
    log_tail: str = ""
    server_log: str = ""
    profile: KernelProfile | None = None
    profile_error: str = ""  # why a requested profile is missing (the measurement still counts)
    curve: tuple[BenchResult, ...] = ()  # the measurements at ``TrialSpec.more_concurrencies``
    # settings the server runs otherwise than asked, as its /server_info reports them (dest -> value)
    ran_as: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the trial produced a valid measurement."""
        return self.failure_kind is None and self.bench is not None

    @classmethod
    def unreported(cls, trial_number: int, config: Config, *, node: str, gpu_ids: tuple[str, ...],
                   sglang_version: str, started_at: float, kind: FailureKind, reason: str) -> TrialResult:
        """The result of a trial whose runner could not report one (lost, or stopped first)."""
        return cls(trial_number=trial_number, config_key=config.key(), argv=(), env=dict(config.env),
                   sglang_version=sglang_version, node=node, gpu_ids=gpu_ids, started_at=started_at,
                   finished_at=time.time(), failure_kind=kind, failure_reason=reason)
