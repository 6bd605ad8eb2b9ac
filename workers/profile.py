"""Where the decode time goes: a short run of the benchmark's load under SGLang's own profiler.

``POST /start_profile {"output_dir", "num_steps", "activities": ["GPU"]}`` makes SGLang record the
next ``num_steps`` forward steps with the PyTorch profiler and write one Chrome trace per rank,
``<output_dir>/<unix time>-TP-0.trace.json.gz`` (seen on SGLang 0.5.17, docs/real-gpu.md); the
profiler stops by itself after those steps, and a later ``POST /stop_profile`` answers 500. The
trace's GPU kernels are ``cat: kernel, ph: X`` events with ``dur`` in microseconds; this module
sums them by name. The simulated engine writes the same kind of file.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from core.errors import BenchmarkError
from core.types import BenchConfig, KernelProfile, KernelShare
from workers.bench import auth_headers, run_benchmark

TOP_KERNELS = 10
TRACE_GLOB = "*TP-0*.trace.json*"  # rank 0's trace; other ranks write their own files
POLL_S = 0.2


def read_trace(path: Path, steps: int = 0, top: int = TOP_KERNELS) -> KernelProfile:
    """The ``top`` kernels of a Chrome trace (``.json`` or ``.json.gz``) by summed duration.
    ValueError when the file is not a trace or has no kernel events."""
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents)")
    total: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for event in events:
        if isinstance(event, dict) and event.get("cat") == "kernel" and event.get("ph") == "X":
            name = str(event.get("name", "?"))
            total[name] += float(event.get("dur") or 0.0)
            calls[name] += 1
    whole = sum(total.values())
    if whole <= 0:
        raise ValueError(f"{path}: the trace has no GPU kernel events")
    ranked = sorted(total, key=lambda n: -total[n])[:top]
    return KernelProfile(trace_path=str(path), steps=steps, total_us=whole, kernel_count=len(total),
                         kernels=tuple(KernelShare(n, total[n] / whole, total[n], calls[n]) for n in ranked))


def _trace_in(out_dir: Path) -> Path | None:
    found = sorted(out_dir.rglob(TRACE_GLOB))
    return found[-1] if found else None


async def profile_decode(url: str, bench: BenchConfig, out_dir: Path, steps: int, timeout_s: float,
                         api_key: str | None = None) -> KernelProfile:
    """Profile ``steps`` decode steps of the benchmark's load (its concurrency, lengths and prompts) on
    the server at ``url``; the trace is written under ``out_dir``. BenchmarkError with the reason when
    the server refuses to profile or no readable trace appears within ``timeout_s``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {"output_dir": str(out_dir.resolve()), "num_steps": steps, "activities": ["GPU"]}
    async with httpx.AsyncClient(base_url=url, timeout=30.0, headers=auth_headers(api_key)) as client:
        reply = await client.post("/start_profile", json=body)
        if reply.status_code != 200:
            raise BenchmarkError(f"{url}/start_profile answered {reply.status_code}: {reply.text.strip()[:200]}")
        load = dataclasses.replace(bench, warmup_s=0.0, duration_s=timeout_s, repeats=1,
                                   early_stop_window_s=None, early_stop_below_tok_s=None)
        with contextlib.suppress(BenchmarkError):  # the load ends when the trace appears; no numbers wanted
            await run_benchmark(url, load, should_stop=lambda: _trace_in(out_dir) is not None, api_key=api_key)
        await client.post("/stop_profile")  # 500 when the profiler already stopped by itself
    return await _read_when_written(out_dir, steps, deadline=time.monotonic() + max(timeout_s, 10.0))


async def _read_when_written(out_dir: Path, steps: int, deadline: float) -> KernelProfile:
    """The trace, once it is complete (a gzip file being written does not parse yet)."""
    last_error = f"no trace file ({TRACE_GLOB}) was written under {out_dir}"
    while time.monotonic() < deadline:
        path = _trace_in(out_dir)
        if path is not None:
            try:
                return read_trace(path, steps)
            except (OSError, EOFError, ValueError) as exc:
                last_error = f"{path.name}: {exc}"
        await asyncio.sleep(POLL_S)
    raise BenchmarkError(f"profiling gave no readable trace: {last_error}")
