"""The decode-throughput benchmark: a closed loop of C concurrent streams against an SGLang server.

Each of the C workers sends a request (fixed input length as token ids, fixed output length with
``ignore_eos``), reads its stream to the end, and sends the next. The first ``warmup_s`` seconds
are not counted; then ``repeats`` windows of ``duration_s`` each are measured. Tokens are counted
from the server's cumulative ``meta_info.completion_tokens`` (native ``/generate``) or ``usage``
(OpenAI ``/v1/completions`` with ``continuous_usage_stats``), never by chunk, so speculative
decoding's multi-token chunks count exactly. See :mod:`workers.metrics` and docs/metrics.md.

The transport is a parameter (``httpx.MockTransport`` in tests). Failures never raise anything
but :class:`core.errors.BenchmarkError`, and never hang past the whole-run timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from core.errors import BenchmarkError
from core.types import BenchConfig, BenchResult
from workers.metrics import (
    Record,
    accept_length,
    achieved_concurrency,
    chunks_in,
    completed_in,
    itl_samples,
    percentiles,
    tokens_in,
    tpot_samples,
    ttft_samples,
)
from workers.replies import body_summary

FAILURE_BACKOFF_S = 0.05
EARLY_ABORT_FAILURES = 32
STOP_POLL_S = 0.1


def _payload(cfg: BenchConfig, prompt_ids: list[int]) -> tuple[str, dict[str, Any]]:
    if cfg.api == "completions":
        return "/v1/completions", {
            "prompt": prompt_ids, "max_tokens": cfg.output_len, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    return "/generate", {"input_ids": prompt_ids, "stream": True, "sampling_params": {
        "max_new_tokens": cfg.output_len, "ignore_eos": True, "temperature": 0.0}}


def _tokens_of(obj: dict[str, Any], api: str, seen: int) -> tuple[int | None, bool]:
    """(cumulative tokens if the event says, finished?) for one stream event."""
    if "error" in obj:
        err = obj["error"]
        raise ValueError(f"server error: {err.get('message', err) if isinstance(err, dict) else err}")
    if api == "completions":
        usage = obj.get("usage") or {}
        choices = obj.get("choices") or []
        finished = bool(choices and choices[0].get("finish_reason"))
        if "completion_tokens" in usage:
            return int(usage["completion_tokens"]), finished
        if choices and choices[0].get("text"):
            return seen + 1, finished  # no usage on this chunk: provisional, corrected by the final usage
        return None, finished
    meta = obj["meta_info"]
    return int(meta["completion_tokens"]), meta.get("finish_reason") is not None


async def _one_request(client: httpx.AsyncClient, path: str, body: dict[str, Any], api: str,
                       rec: Record) -> None:
    try:
        async with client.stream("POST", path, json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                rec.error = f"HTTP {resp.status_code}: {body_summary(text)}"
                return
            done = finished = False
            async for line in resp.aiter_lines():  # read to the end: the connection is then reused
                if not line or done:
                    continue
                if not line.startswith("data:"):
                    rec.error = f"malformed stream line: {body_summary(line, 60)!r}"
                    return
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    continue
                obj = json.loads(data)
                count, fin = _tokens_of(obj, api, rec.output_tokens)
                finished = finished or fin
                if count is not None and count > rec.output_tokens:
                    rec.events.append((time.perf_counter(), count))
                if fin and api == "generate":
                    rec.spec_verify_ct = obj["meta_info"].get("spec_verify_ct")
            rec.end = time.perf_counter()
            if not done or not finished:
                rec.error = "truncated stream (ended without finish_reason and [DONE])"
            else:
                rec.finished = True
    except httpx.TimeoutException as exc:
        rec.error = f"timeout: {type(exc).__name__}"
    except httpx.HTTPError as exc:
        rec.error = f"connection error: {type(exc).__name__}: {body_summary(str(exc), 120)}"
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        rec.error = f"malformed event: {body_summary(str(exc), 120)}"
    finally:
        if rec.end is None:
            rec.end = time.perf_counter()


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The headers that present a server's ``--api-key`` (none without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class _Run:
    """The moving parts of one benchmark run: the requests so far, why it must stop, early stopping."""

    def __init__(self, cfg: BenchConfig, should_stop: Callable[[], bool] | None) -> None:
        self.cfg, self.should_stop = cfg, should_stop
        self.rng = random.Random(cfg.seed)
        self.path, _ = _payload(cfg, [])
        self.records: list[Record] = []
        self.warm_end = time.perf_counter() + cfg.warmup_s
        self.end = self.warm_end + cfg.repeats * cfg.duration_s
        self.failures = 0
        self.abort: list[str] = []
        window = cfg.early_stop_window_s
        self.early_at = (self.warm_end + window if cfg.early_stop_below_tok_s and window and window < cfg.duration_s
                         else None)
        self.early_stopped = False

    async def worker(self, client: httpx.AsyncClient) -> None:
        """One closed-loop stream: a request after each response until the end or an abort."""
        cfg = self.cfg
        while time.perf_counter() < self.end and not self.abort:
            low, high = cfg.prompt_id_range()
            prompt = [self.rng.randrange(low, high) for _ in range(cfg.input_len)]
            _, body = _payload(cfg, prompt)
            rec = Record(start=time.perf_counter())
            self.records.append(rec)
            await _one_request(client, self.path, body, cfg.api, rec)
            if rec.error:
                self.failures += 1
                if self.failures >= EARLY_ABORT_FAILURES and not any(r.finished for r in self.records):
                    self.abort.append(rec.error)
                await asyncio.sleep(FAILURE_BACKOFF_S)

    async def watch(self) -> None:
        """Return when the run should end early (clearly slow), or abort when ``should_stop`` says so."""
        checked = self.early_at is None
        while self.should_stop is None or not self.should_stop():
            if not checked and self.early_at is not None and time.perf_counter() >= self.early_at:
                checked = True
                rate = tokens_in(self.records, self.warm_end, self.early_at) / (self.early_at - self.warm_end)
                if rate < (self.cfg.early_stop_below_tok_s or 0.0):
                    self.early_stopped = True
                    return
            await asyncio.sleep(STOP_POLL_S)
        self.abort.append("stopped: the server is no longer running")

    def result(self, url: str) -> BenchResult:
        """The metrics, or BenchmarkError with the reason there are none."""
        now = time.perf_counter()
        if self.abort and self.abort[0].startswith("stopped:"):
            raise BenchmarkError(f"{url}: {self.abort[0]}")
        if self.abort:
            raise BenchmarkError(f"{url}: every request failed ({self.failures} failures), last: {self.abort[0]}")
        if self.early_stopped and self.early_at is not None:
            short = dataclasses.replace(self.cfg, duration_s=self.early_at - self.warm_end, repeats=1)
            return dataclasses.replace(summarize(self.records, short, self.warm_end, now, url), early_stopped=True)
        return summarize(self.records, self.cfg, self.warm_end, now, url)


async def run_benchmark(url: str, cfg: BenchConfig, transport: httpx.AsyncBaseTransport | None = None,
                        on_phase: Callable[[str], None] | None = None,
                        should_stop: Callable[[], bool] | None = None, api_key: str | None = None) -> BenchResult:
    """Benchmark the server at ``url``; BenchmarkError with the reason if no valid measurement.

    ``on_phase`` is called with "warm-up" at the start and "measuring" when the window opens;
    ``should_stop`` is polled every 0.1 s and ends the run at once (server died, interrupted).
    Early stopping: with ``early_stop_below_tok_s`` and ``early_stop_window_s`` set, a run whose
    first ``early_stop_window_s`` of measurement is below that rate ends there, and its result
    (measured over that short window) says ``early_stopped``. ``api_key``: the server's ``--api-key``,
    sent as ``Authorization: Bearer``.
    """
    timeout = httpx.Timeout(cfg.request_timeout_s, connect=min(10.0, cfg.request_timeout_s))
    limits = httpx.Limits(max_connections=cfg.concurrency + 4, max_keepalive_connections=cfg.concurrency + 4)
    run = _Run(cfg, should_stop)
    if on_phase is not None:
        on_phase("warm-up")
        asyncio.get_running_loop().call_later(cfg.warmup_s, on_phase, "measuring")
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=timeout, limits=limits,
                                 headers=auth_headers(api_key)) as client:
        tasks = [asyncio.create_task(run.worker(client)) for _ in range(cfg.concurrency)]
        watcher = asyncio.create_task(run.watch())
        workers_done = asyncio.gather(*tasks, return_exceptions=True)
        waited: list[asyncio.Future[Any]] = [watcher, workers_done]
        await asyncio.wait(waited, timeout=max(run.end - time.perf_counter(), 0.0),
                           return_when=asyncio.FIRST_COMPLETED)
        for task in [*tasks, watcher]:
            task.cancel()
        outcomes = await workers_done
        await asyncio.gather(watcher, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, Exception) and not isinstance(outcome, asyncio.CancelledError):
                raise BenchmarkError(f"{url}: benchmark client error: {outcome!r}")
    return run.result(url)


def summarize(records: list[Record], cfg: BenchConfig, warm_end: float, now: float, url: str) -> BenchResult:
    """Turn request records into a BenchResult (BenchmarkError when the run is not a valid measurement)."""
    span_end = warm_end + cfg.repeats * cfg.duration_s
    windows = [(warm_end + k * cfg.duration_s, warm_end + (k + 1) * cfg.duration_s)
               for k in range(cfg.repeats)]
    window_tok_s = tuple(tokens_in(records, lo, hi) / cfg.duration_s for lo, hi in windows)
    done = completed_in(records, warm_end, span_end)
    failed = [r for r in records if r.error and r.end is not None and warm_end <= r.end <= span_end]
    errors = Counter(r.error or "" for r in failed)
    attempts = len(done) + len(failed)
    if attempts and len(failed) / attempts > cfg.max_failed_fraction:
        top = "; ".join(f"{n}x {e}" for e, n in errors.most_common(2))
        raise BenchmarkError(f"{url}: {len(failed)} of {attempts} requests failed "
                             f"(> {cfg.max_failed_fraction:.0%}): {top}")
    output_tokens = tokens_in(records, warm_end, span_end)
    if output_tokens == 0:
        raise BenchmarkError(f"{url}: no output tokens arrived in the {cfg.duration_s:g} s window")
    tok_s = statistics.median(window_tok_s)
    tpot = percentiles(tpot_samples(done), 1000.0)
    conc = achieved_concurrency(records, warm_end, span_end, now)
    return BenchResult(
        tok_s=tok_s, window_tok_s=window_tok_s,
        request_throughput=len(done) / (cfg.repeats * cfg.duration_s),
        per_user_tok_s=1000.0 / tpot["p50"] if tpot["p50"] and tpot["p50"] == tpot["p50"] else 0.0,
        ttft_ms=percentiles(ttft_samples(records, warm_end, span_end), 1000.0),
        tpot_ms=tpot,
        itl_ms=percentiles(itl_samples(records, warm_end, span_end), 1000.0),
        e2e_ms=percentiles([(r.end or 0) - r.start for r in done], 1000.0),
        completed=len(done), failed=len(failed), output_tokens=output_tokens,
        output_chunks=chunks_in(records, warm_end, span_end),
        achieved_concurrency=conc, concurrency=cfg.concurrency,
        held_concurrency=conc >= 0.95 * cfg.concurrency, accept_length=accept_length(done),
        duration_s=cfg.repeats * cfg.duration_s,
        spread=(max(window_tok_s) - min(window_tok_s)) / tok_s if tok_s else 0.0,
        errors=tuple(f"{n}x {e}" for e, n in errors.most_common(5)),
    )
