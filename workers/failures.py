"""Classify a failed SGLang launch from its exit code and log (reference §8 signatures)."""

from __future__ import annotations

import re

from core.types import FailureKind

# Checked in order: the first kind with a matching line wins.
SIGNATURES: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    # the node, not the configuration: SGLang (or the simulator) is not importable there
    (FailureKind.INFRASTRUCTURE, re.compile(r"No module named '?(sglang|workers)\b")),
    (FailureKind.BAD_FLAG, re.compile(
        r"error: (unrecognized arguments|ambiguous option|argument --\S+: invalid choice|argument --)")),
    (FailureKind.CUDA_GRAPH, re.compile(r"Capture cuda graph failed|Fail when using backend: .* for prefill")),
    (FailureKind.OOM, re.compile(
        r"OutOfMemoryError|CUDA out of memory|Not enough memory\. Please try to increase|"
        r"memory capacity is unbalanced")),
    (FailureKind.NCCL, re.compile(r"NCCL error|DistBackendError|ProcessGroupNCCL|NCCL WARN")),
    (FailureKind.UNSUPPORTED, re.compile(
        r"NotImplementedError|not supported for the current GPU|Unsupported architecture|"
        r"requires an SM\d+|Unsupported (moe_runner_backend|runner backend)|no kernel image is available|"
        r"ptxas .*sm_\d+|Current platform does not support")),
    (FailureKind.CONFIG_ERROR, re.compile(
        r"^(ValueError|AssertionError|TypeError|KeyError)\b|Unknown speculative algorithm|"
        r"parallel topology is inconsistent|scheduler died during initialization", re.M)),
)

# Lines after which the server is certainly going down: stop waiting for it at once.
FATAL_LINES = re.compile(
    r"Scheduler hit an exception|Initialization failed\. warmup error|Received sigquit from a child process|"
    r"sglang serve: error:")


def classify(exit_code: int | None, log: str) -> FailureKind:
    """The failure kind for a server that exited with ``exit_code`` (None: still running) and ``log``."""
    for kind, pattern in SIGNATURES:
        if pattern.search(log):
            return kind
    if exit_code == 2:
        return FailureKind.BAD_FLAG
    if exit_code == 1:
        return FailureKind.CONFIG_ERROR
    return FailureKind.CRASHED


EXCEPTION_LINE = re.compile(r"^(\[[^\]]*\]\s*)?([\w.]+(Error|Exception|Interrupt)|AssertionError)\b.*")


def reason_line(log: str) -> str:
    """The most telling line of a failure log: the last signature match, else the last exception
    line (``RuntimeError: ...``), else the last line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for line in reversed(lines):
        if any(p.search(line) for _, p in SIGNATURES):
            return line[:300]
    for line in reversed(lines):
        if EXCEPTION_LINE.match(line):
            return line[:300]
    return lines[-1][:300] if lines else "no log output"
