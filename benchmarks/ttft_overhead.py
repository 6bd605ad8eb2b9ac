"""How much the benchmark client adds to TTFT at C1 and C16, against a reference client.

The simulated server's TTFT is known (here 10 ms real time), so what a client measures above it is
request turnaround: the client's connection handling plus the server's HTTP stack. The reference is
aiohttp (what SGLang's `sglang.benchmark.serving` uses; installed with ray[default]). Run:

    python benchmarks/ttft_overhead.py [--duration 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.types import BenchConfig
from tests.conftest import steady_sim
from workers.bench import run_benchmark

TIME_SCALE, TTFT_MS, OUTPUT_LEN, INPUT_LEN = 30, 300, 192, 256


async def reference_ttft_ms(url: str, concurrency: int, duration_s: float) -> float:
    """TTFT p50 (ms) measured by a closed loop of aiohttp streams, first request per stream excluded."""
    body = {"input_ids": list(range(INPUT_LEN)), "stream": True,
            "sampling_params": {"max_new_tokens": OUTPUT_LEN, "ignore_eos": True}}
    samples: list[float] = []
    stop = time.perf_counter() + duration_s

    async def stream(session: aiohttp.ClientSession) -> None:
        first_request = True
        while time.perf_counter() < stop:
            t0, first = time.perf_counter(), None
            async with session.post(url + "/generate", json=body) as resp:
                async for line in resp.content:
                    if first is None and line.startswith(b"data:"):
                        first = time.perf_counter()
            if not first_request and first is not None:
                samples.append((first - t0) * 1000)
            first_request = False

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(stream(session) for _ in range(concurrency)))
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    with steady_sim(30.0, TTFT_MS, TIME_SCALE) as server:
        print(f"server TTFT {TTFT_MS / TIME_SCALE:.0f} ms; {OUTPUT_LEN}-token outputs, TTFT p50 measured by:")
        for c in (1, 16):
            cfg = BenchConfig(concurrency=c, input_len=INPUT_LEN, output_len=OUTPUT_LEN, warmup_s=4.0,
                              duration_s=args.duration)
            ours = asyncio.run(run_benchmark(server.url, cfg)).ttft_ms["p50"]
            reference = asyncio.run(reference_ttft_ms(server.url, c, args.duration + 4.0))
            print(f"  C{c:<3} tuner client (httpx) {ours:6.1f} ms   reference (aiohttp) {reference:6.1f} ms")

if __name__ == "__main__":
    main()
