"""Measure the benchmark client and the simulated engine at high token rates.

Goal (issues 3 and 4): at C16 against a fast simulated scenario, the simulator streams and the
client counts at least 20,000 tokens/s in total, each on one core. Run:

    python benchmarks/client_throughput.py [--tok-s 300] [--duration 10]

It prints the modelled rate, what the client measured, both processes' CPU use, and whether the
client held concurrency 16.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.types import BenchConfig
from tests.conftest import steady_sim
from workers.bench import run_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tok-s", type=float, default=300.0, help="modelled tok/s@C16 (x100 time scale)")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--output-len", type=int, default=256)
    args = parser.parse_args()
    with steady_sim(args.tok_s, ttft_ms=100, time_scale=100) as server:
        sp, me = psutil.Process(server.pid), psutil.Process(os.getpid())
        s0, c0, t0 = sp.cpu_times(), me.cpu_times(), time.monotonic()
        cfg = BenchConfig(concurrency=16, input_len=128, output_len=args.output_len, warmup_s=2.0,
                          duration_s=args.duration)
        result = asyncio.run(run_benchmark(server.url, cfg))
        s1, c1, wall = sp.cpu_times(), me.cpu_times(), time.monotonic() - t0
    print(f"modelled decode rate:  {args.tok_s * 100:,.0f} tok/s at C16 (time_scale 100)")
    print(f"measured tok/s@C16:    {result.tok_s:,.0f}  (chunks/s {result.output_chunks / cfg.duration_s:,.0f})")
    print(f"achieved concurrency:  {result.achieved_concurrency:.2f} (held: {result.held_concurrency})")
    print(f"simulator CPU:         {(s1.user + s1.system - s0.user - s0.system) / wall:.0%} of one core")
    print(f"client CPU:            {(c1.user + c1.system - c0.user - c0.system) / wall:.0%} of one core")
    print(f"TTFT p50 {result.ttft_ms['p50']:.1f} ms, ITL p50 {result.itl_ms['p50']:.3f} ms")


if __name__ == "__main__":
    main()
