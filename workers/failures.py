"""Classify a failed SGLang launch from its exit code and log (reference §8 signatures, and the real
SGLang 0.5.17 logs of tests/fixtures/real-logs/).

The log decides first, the exit code last: scheduler failures always end with SIGKILL (-9) from
SGLang's own cleanup, whatever the cause. The reason shown is the line that decided the kind (the
exception, not the ``kill_process_tree called`` line that ends every such log).
"""

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
        r"memory capacity is unbalanced|leave no GPU memory for the KV cache")),
    (FailureKind.NCCL, re.compile(r"NCCL error|DistBackendError|ProcessGroupNCCL|NCCL WARN")),
    (FailureKind.UNSUPPORTED, re.compile(
        r"NotImplementedError|not supported for the current GPU|Unsupported architecture|"
        r"requires an SM\d+|Unsupported (moe_runner_backend|runner backend)|no kernel image is available|"
        r"ptxas .*sm_\d+|Current platform does not support|is only supported on \w+ GPUs|"
        r"only supported on (SM|sm_?)\d+")),
    (FailureKind.CONFIG_ERROR, re.compile(
        r"^(ValueError|AssertionError|TypeError|KeyError)\b|Unknown speculative algorithm|"
        r"parallel topology is inconsistent|scheduler died during initialization", re.M)),
    # a subprocess died with no exception of its own in the log (killed from outside, segfault ...)
    (FailureKind.CRASHED, re.compile(r"Subprocess \S+ \(pid=\d+\) crashed with exit code")),
)

# Lines after which the server is certainly going down: stop waiting for it at once.
FATAL_LINES = re.compile(
    r"Scheduler hit an exception|Initialization failed\. warmup error|Received sigquit from a child process|"
    r"sglang serve: error:")


EXCEPTION_LINE = re.compile(r"^(\[[^\]]*\]\s*)?([\w.]+(Error|Exception|Interrupt)|AssertionError)\b.*")


def diagnose(exit_code: int | None, log: str) -> tuple[FailureKind, str]:
    """The failure kind of a server that exited with ``exit_code`` (None: still running) and its most
    telling log line: the last line of the first signature that matches, else the last exception line
    (``RuntimeError: ...``), else the last line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for kind, pattern in SIGNATURES:
        matching = [i for i, line in enumerate(lines) if pattern.search(line)]
        if matching:
            line = lines[matching[-1]]
            if kind == FailureKind.CRASHED:  # name the exception above the crash, if the log has one
                cause = next((ln for ln in reversed(lines[:matching[-1]]) if EXCEPTION_LINE.match(ln)), None)
                line = f"{cause} ({line})" if cause else line
            return kind, line[:300]
    kind = {2: FailureKind.BAD_FLAG, 1: FailureKind.CONFIG_ERROR}.get(exit_code or 0, FailureKind.CRASHED)
    for line in reversed(lines):
        if EXCEPTION_LINE.match(line):
            return kind, line[:300]
    return kind, lines[-1][:300] if lines else "no log output"


def classify(exit_code: int | None, log: str) -> FailureKind:
    """The failure kind (see :func:`diagnose`)."""
    return diagnose(exit_code, log)[0]


def reason_line(log: str) -> str:
    """The most telling line of a failure log (see :func:`diagnose`)."""
    return diagnose(None, log)[1]
