"""Token pacing for the simulated engine: every request in the server decodes at the rate the
scenario gives for the current concurrency, in steps of ``accept_len`` tokens on average.

Each request is credited decode steps by the wall clock, so throughput stays exact even when the
event loop is busy (tokens then arrive in bigger chunks, like SGLang under load, and are still
counted exactly by ``completion_tokens``).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from workers.sim.scenario import Outcome, Scenario

WORDS = ("the", "model", "answers", "with", "tokens", "paced", "by", "a", "simulated", "scheduler",
         "on", "modelled", "hardware", "and", "streams", "them", "back", "to", "client", "steadily")
GARBAGE_TOKEN = "!"


def token_id(piece: str) -> int:
    """A stable token id for a text piece (0 is the garbage token)."""
    if piece == GARBAGE_TOKEN:
        return 0
    return 1 + int(hashlib.blake2s(piece.encode(), digest_size=4).hexdigest(), 16) % 150_000


def count_prompt_tokens(text: str) -> int:
    """The simulated tokenizer: one token per word or punctuation mark."""
    return max(1, len(re.findall(r"\w+|[^\w\s]", text)))


@dataclass(eq=False)
class Request:
    """One generation in flight."""

    max_new_tokens: int
    ignore_eos: bool
    answer: list[str]
    rng: random.Random
    pieces: list[str] = field(default_factory=list)
    step_credit: float = 0.0
    verify_ct: int = 0
    decoding: bool = False
    finished: bool = False
    finish_reason: str = "length"

    def _next_piece(self) -> str | None:
        i = len(self.pieces)
        if i < len(self.answer):
            return self.answer[i]
        if self.answer and not self.ignore_eos:
            return None  # EOS after the answer
        return " " + WORDS[self.rng.randrange(len(WORDS))]

    def add_tokens(self, n: int) -> None:
        """Append up to ``n`` tokens; finishes at max_new_tokens or EOS."""
        for _ in range(n):
            if len(self.pieces) >= self.max_new_tokens:
                break
            piece = self._next_piece()
            if piece is None:
                self.finished, self.finish_reason = True, "stop"
                break
            self.pieces.append(piece)
        if len(self.pieces) >= self.max_new_tokens:
            self.finished = True


class Scheduler:
    """Paces tokens for all requests of one simulated server."""

    def __init__(self, scenario: Scenario, outcome: Outcome, garbage: bool = False,
                 tick_s: float = 0.01) -> None:
        self.scenario = scenario
        self.outcome = outcome
        self.garbage = garbage
        self.tick_s = tick_s
        self.requests: set[Request] = set()
        self.completed = 0
        self.stalled = False
        self.spec_tokens = 0
        self.spec_steps = 0
        self.generated_tokens = 0  # every output token so far (SGLang's sglang:generation_tokens_total)
        self.batch_steps = 0.0  # decode steps of the whole batch so far (what a profiler counts)
        self.on_step: Callable[[], None] | None = None  # called after each request's decode step
        self.ready_at = time.monotonic()  # the origin of the rate's window drift (Noise.drift)
        self._seq = 0

    def answer_for(self, prompt: str) -> list[str]:
        """The token pieces the simulated model answers ``prompt`` with ([] = free text)."""
        if self.garbage:
            return []
        for resp in self.scenario.responses:
            if re.search(resp.prompt, prompt):
                return re.findall(r"\s*\S{1,4}", resp.text)
        return []

    def step_rate(self) -> float:
        """Decode steps per second of one stream at the current number of requests in the server
        (the launch's window drift at this moment included)."""
        in_server = max(len(self.requests), 1)
        per_stream = self.outcome.decode_tok_s(in_server, self.scenario.saturation_c) / in_server
        modelled_s = (time.monotonic() - self.ready_at) * self.scenario.time_scale
        drift = self.scenario.noise.drift(self.outcome.launch_seed, modelled_s)
        return per_stream * drift * self.scenario.time_scale / self.outcome.accept_len

    def _draw_tokens(self, req: Request, steps: int) -> int:
        accept = self.outcome.accept_len
        whole, frac = math.floor(accept), accept - math.floor(accept)
        return sum(whole + (1 if req.rng.random() < frac else 0) for _ in range(steps))

    async def generate(self, prompt: str, max_new_tokens: int, ignore_eos: bool) -> AsyncIterator[Request]:
        """Yield the request each time it has new tokens; the last yield has ``finished`` set.

        Each request wakes when its next decode step is due by the wall clock (at most every
        ``tick_s``, then with several steps' tokens at once), so pacing has no tick bias.
        """
        loop = asyncio.get_running_loop()
        self._seq += 1
        req = Request(max_new_tokens=max(1, max_new_tokens), ignore_eos=ignore_eos or self.garbage,
                      answer=[GARBAGE_TOKEN] * max_new_tokens if self.garbage else self.answer_for(prompt),
                      rng=random.Random(self._seq))
        self.requests.add(req)
        try:
            await asyncio.sleep(self.outcome.ttft_ms / 1000.0 / self.scenario.time_scale)
            while self.stalled:
                await asyncio.sleep(3600)
            req.add_tokens(1)
            self.generated_tokens += len(req.pieces)
            req.decoding = True
            last = loop.time()
            while True:
                yield req
                if req.finished:
                    self.completed += 1
                    return
                rate = self.step_rate()
                wait = max((1.0 - req.step_credit) / rate, self.tick_s)
                await asyncio.sleep(wait)
                while self.stalled:
                    await asyncio.sleep(3600)
                now = loop.time()
                req.step_credit += (now - last) * self.step_rate()
                last = now
                steps = int(req.step_credit)
                req.step_credit -= steps
                self.batch_steps += steps / max(len(self.requests), 1)
                if self.on_step is not None:
                    self.on_step()
                before = len(req.pieces)
                req.add_tokens(self._draw_tokens(req, steps))
                added = len(req.pieces) - before
                self.generated_tokens += added
                if added:
                    req.verify_ct += steps
                    self.spec_tokens += added
                    self.spec_steps += steps
        finally:
            self.requests.discard(req)

    def avg_accept_length(self) -> float | None:
        """Accepted tokens per verify step since start or the last flush (None without spec)."""
        if self.outcome.accept_len <= 1.0 or not self.spec_steps:
            return None
        return self.spec_tokens / self.spec_steps

    def flush(self) -> None:
        """Reset the speculative counters (what /flush_cache does)."""
        self.spec_tokens = self.spec_steps = 0
