"""Metrics from per-request stream records, defined like ``sglang.benchmark.serving`` (reference §5).

A :class:`Record` is one request as the client saw it: send time, the times at which the server's
cumulative completion-token count grew (so a speculative chunk of 3 tokens is one event adding 3),
the end time, and an error if it failed. Definitions (docs/metrics.md):

* tok/s in a window: tokens whose event time falls inside the window / window length;
* TTFT: first event - send, for requests whose first token arrived in the measurement span;
* ITL: each event's gap to the previous one, divided evenly over the tokens it added, one sample
  per token, for events inside the span;
* TPOT: (end - send - TTFT) / (output tokens - 1) for requests that finished in the span;
* E2E: end - send for requests that finished in the span;
* achieved concurrency: time-averaged number of requests in flight over the span.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass
class Record:
    """One request as seen by the client (times from ``time.perf_counter``)."""

    start: float
    events: list[tuple[float, int]] = field(default_factory=list)
    end: float | None = None
    finished: bool = False
    error: str | None = None
    spec_verify_ct: int | None = None

    @property
    def output_tokens(self) -> int:
        """The server's final (or last seen) completion-token count."""
        return self.events[-1][1] if self.events else 0

    @property
    def ttft(self) -> float | None:
        """Seconds from send to the first token, None if none arrived."""
        return self.events[0][0] - self.start if self.events else None


def percentiles(values: list[float], scale: float = 1.0) -> dict[str, float]:
    """mean, p50, p90, p99 (linear interpolation) of ``values`` x ``scale``; NaN when empty."""
    if not values:
        return {k: math.nan for k in ("mean", "p50", "p90", "p99")}
    data = sorted(v * scale for v in values)

    def pct(q: float) -> float:
        pos = (len(data) - 1) * q
        lo = math.floor(pos)
        hi = min(lo + 1, len(data) - 1)
        return data[lo] + (data[hi] - data[lo]) * (pos - lo)

    return {"mean": statistics.fmean(data), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99)}


def tokens_in(records: list[Record], lo: float, hi: float) -> int:
    """Output tokens whose arrival time is in [lo, hi)."""
    total = 0
    for rec in records:
        prev = 0
        for t, n in rec.events:
            if lo <= t < hi:
                total += n - prev
            prev = n
    return total


def chunks_in(records: list[Record], lo: float, hi: float) -> int:
    """Stream events that carried tokens in [lo, hi) (what a chunk-counting client would report)."""
    return sum(1 for rec in records for t, _ in rec.events if lo <= t < hi)


def itl_samples(records: list[Record], lo: float, hi: float) -> list[float]:
    """Per-token inter-token latencies (seconds) for events in [lo, hi)."""
    out: list[float] = []
    for rec in records:
        for (t0, n0), (t1, n1) in zip(rec.events, rec.events[1:], strict=False):
            if lo <= t1 < hi and n1 > n0:
                out.extend([(t1 - t0) / (n1 - n0)] * (n1 - n0))
    return out


def ttft_samples(records: list[Record], lo: float, hi: float) -> list[float]:
    """TTFT (seconds) of requests whose first token arrived in [lo, hi)."""
    return [r.events[0][0] - r.start for r in records if r.events and lo <= r.events[0][0] < hi]


def completed_in(records: list[Record], lo: float, hi: float) -> list[Record]:
    """Requests that finished successfully within [lo, hi]."""
    return [r for r in records if r.finished and r.error is None and r.end is not None and lo <= r.end <= hi]


def tpot_samples(done: list[Record]) -> list[float]:
    """TPOT (seconds) per finished request with more than one output token."""
    out = []
    for r in done:
        if r.output_tokens > 1 and r.end is not None and r.ttft is not None:
            out.append((r.end - r.start - r.ttft) / (r.output_tokens - 1))
    return out


def achieved_concurrency(records: list[Record], lo: float, hi: float, now: float) -> float:
    """Time-averaged number of requests in flight over [lo, hi]."""
    if hi <= lo:
        return 0.0
    busy = 0.0
    for r in records:
        end = r.end if r.end is not None else now
        busy += max(0.0, min(end, hi) - max(r.start, lo))
    return busy / (hi - lo)


def accept_length(done: list[Record]) -> float | None:
    """Output tokens per speculative verify step over finished requests that report it."""
    spec = [r for r in done if r.spec_verify_ct]
    if not spec:
        return None
    return sum(r.output_tokens for r in spec) / sum(r.spec_verify_ct or 0 for r in spec)
