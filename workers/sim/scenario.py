"""Scenario files: how a simulated SGLang deployment performs and fails (format: docs/simulator.md).

A scenario has base figures (aggregate decode tok/s at 16 concurrent streams, TTFT, startup
time), *effects* that change them when their ``match`` holds, *failures* that fire when theirs
holds, seeded noise and a ``time_scale``. Matching sees SGLang's parsed options by dest name
(defaults included, so ``ep_size: 1`` matches an unset ``--ep-size``) and ``env.VAR`` keys.

Value patterns: a scalar matches equal values; a string with ``* ? [`` is a glob; ``<16``,
``<=16``, ``>48``, ``>=32``, ``!=x`` compare (``!=*glob*``: does not match the glob); a list
matches any of its patterns; ``null`` matches
an unset option. Effect values: a number multiplies; ``"+75"``/``"-20"`` add; ``"=30"`` sets.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import ConfigError
from core.validation import format_validation_error, read_yaml

Pattern = str | int | float | bool | None | list[str | int | float | bool | None]
Adjust = float | str


# A decode step's GPU kernels on a MoE model and their relative time (kernel names as SGLang's traces
# spell them on Hopper); a scenario's ``kernels:`` replaces the mix, an effect's sets the weights it names
# (0 removes a kernel).
DECODE_KERNELS = {"fused_moe_kernel": 0.36, "flash_attn_decode_kernel": 0.22, "nvjet_sm90_gemm_bf16": 0.18,
                  "cross_device_reduce_1stage": 0.12, "rms_norm_kernel": 0.07, "top_k_top_p_sampling_kernel": 0.05}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuSpec(_Strict):
    """The modelled hardware."""

    name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    arch: str = "sm_120"
    count: Annotated[int, Field(ge=1)] = 8
    memory_gb: float = 96.0
    driver: str = "580.95.05"


class BaseFigures(_Strict):
    """Figures of the configuration with no effect applied."""

    tok_s_c16: Annotated[float, Field(gt=0)]
    ttft_ms: Annotated[float, Field(ge=0)] = 500.0
    startup_s: Annotated[float, Field(ge=0)] = 120.0
    accept_len: Annotated[float, Field(ge=1)] = 1.0


class Effect(_Strict):
    """When ``match`` holds: adjust throughput, TTFT, startup time, speculative accept length."""

    match: dict[str, Pattern]
    tok_s: Adjust | None = None
    ttft_ms: Adjust | None = None
    startup_s: Adjust | None = None
    accept_len: Adjust | None = None
    log: str = ""  # a line the server prints while starting (a warning or an auto-adjustment SGLang makes)
    kernels: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)  # set in the decode step's mix
    note: str = ""


class Adjustment(_Strict):
    """When ``match`` holds (on the options as asked), SGLang runs other values than asked: ``sets``
    (dest -> value), saying ``log`` (``{dest}`` fields: the options as asked). Effects and failures then
    see the options as run, and ``/server_info`` reports them ("deepep MoE is enabled. The expert
    parallel size is adjusted from 1 to the tensor parallel size [8].")."""

    match: dict[str, Pattern]
    sets: dict[str, str | int | float | bool | None]
    log: str = ""
    note: str = ""


class FailureRule(_Strict):
    """When ``match`` holds the server fails ``at`` a phase, printing ``log`` and exiting ``exit_code``."""

    match: dict[str, Pattern]
    at: Literal["startup", "warmup", "runtime", "output", "hang"]
    log: str = ""
    exit_code: int | None = None
    after_requests: Annotated[int, Field(ge=0)] = 0
    note: str = ""


def mean_one_lognormal(rng: random.Random, cv: float) -> float:
    """One log-normal draw with mean 1 and coefficient of variation ``cv``."""
    sigma = math.sqrt(math.log(1 + cv ** 2))
    return rng.lognormvariate(-sigma * sigma / 2, sigma)


@functools.lru_cache(maxsize=4096)
def _stretch_factor(noise_seed: int, launch_seed: int, stretch: int, cv: float) -> float:
    """The drift of one stretch of one launch (cached: the live server asks at every decode step)."""
    return mean_one_lognormal(random.Random(f"{noise_seed}:window:{launch_seed}:{stretch}"), cv)


class Noise(_Strict):
    """Noise on throughput. ``cv``: log-normal, fixed per (seed, configuration) - part of what the
    configuration *is*, one draw per set of matched effects
    (:meth:`own_deviation`). ``run_cv``: log-normal per launch (run-to-run measurement noise).
    ``outlier_rate``: the chance that one launch reads ``outlier_factor`` x low (a noisy neighbour).
    ``window_cv``: log-normal drift of one running server's rate, constant over each ``window_s``
    modelled seconds and drawn anew for the next (what consecutive benchmark windows of real SGLang
    show: 2-5% on the H100s of docs/real-gpu.md)."""

    cv: Annotated[float, Field(ge=0)] = 0.0
    seed: int = 0
    run_cv: Annotated[float, Field(ge=0)] = 0.0
    outlier_rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    outlier_factor: Annotated[float, Field(gt=0, le=1)] = 0.7
    window_cv: Annotated[float, Field(ge=0)] = 0.0
    window_s: Annotated[float, Field(gt=0)] = 8.0

    def own_deviation(self, matched: Sequence[dict[str, Any]]) -> float:
        """A configuration's own deviation (``cv``), drawn from what it runs: the ``match`` clauses of
        the scenario's effects it matches (in any order). Configurations that match the same effects
        (they differ only in settings, or values, that no effect tells apart) run the same thing, and
        real SGLang reads such configurations alike beyond launch noise (three CUDA-graph sizes at
        C16 on two H100 nodes: docs/real-gpu.md), so they share one deviation."""
        if self.cv == 0:
            return 1.0
        runs = sorted(repr(sorted((k, repr(v)) for k, v in match.items())) for match in matched)
        seed = int(hashlib.sha256(f"{self.seed}:effects:{runs}".encode()).hexdigest()[:12], 16)
        return mean_one_lognormal(random.Random(seed), self.cv)

    def launch_factor(self, launch_seed: int | None) -> float:
        """The multiplicative noise of one launch (1.0 without ``launch_seed`` or run noise)."""
        if launch_seed is None or (self.run_cv == 0 and self.outlier_rate == 0):
            return 1.0
        rng = random.Random(f"{self.seed}:launch:{launch_seed}")
        factor = 1.0
        if self.run_cv > 0:
            factor = mean_one_lognormal(rng, self.run_cv)
        if rng.random() < self.outlier_rate:
            factor *= self.outlier_factor
        return factor

    def drift(self, launch_seed: int | None, t_s: float) -> float:
        """The rate factor of one launch ``t_s`` modelled seconds after it became ready (1.0 without
        ``launch_seed`` or window noise): one log-normal draw (mean 1) per ``window_s`` stretch."""
        if launch_seed is None or self.window_cv == 0:
            return 1.0
        return _stretch_factor(self.seed, launch_seed, math.floor(max(t_s, 0.0) / self.window_s), self.window_cv)

    def mean_drift(self, launch_seed: int | None, start_s: float, end_s: float) -> float:
        """The time average of :meth:`drift` over [start_s, end_s) (what a window of that span reads)."""
        if end_s <= start_s:
            return self.drift(launch_seed, start_s)
        first, last = math.floor(start_s / self.window_s), math.ceil(end_s / self.window_s)
        total = 0.0
        for stretch in range(first, last):
            lo, hi = max(start_s, stretch * self.window_s), min(end_s, (stretch + 1) * self.window_s)
            if hi > lo:
                total += self.drift(launch_seed, (lo + hi) / 2) * (hi - lo)
        return total / (end_s - start_s)


class Response(_Strict):
    """What the simulated model answers to prompts matching ``prompt`` (a regex)."""

    prompt: str
    text: str


class Scenario(_Strict):
    """A whole scenario file."""

    name: str
    description: str = ""
    sglang_version: str = "0.5.23"
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    time_scale: Annotated[float, Field(gt=0)] = 1.0
    saturation_c: Annotated[float, Field(gt=0)] = 48.0
    base: BaseFigures
    adjustments: list[Adjustment] = Field(default_factory=list)
    effects: list[Effect] = Field(default_factory=list)
    failures: list[FailureRule] = Field(default_factory=list)
    noise: Noise = Field(default_factory=Noise)
    responses: list[Response] = Field(default_factory=list)
    kernels: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=lambda: dict(DECODE_KERNELS))


@dataclass(frozen=True)
class Outcome:
    """The modelled behaviour of one configuration (hardware time, not scaled)."""

    tok_s_c16: float
    ttft_ms: float
    startup_s: float
    accept_len: float
    failure: FailureRule | None
    noise_factor: float
    notices: tuple[str, ...] = ()  # the ``log`` lines of the effects that hold
    kernels: tuple[tuple[str, float], ...] = ()  # a decode step's GPU kernels and their relative time
    launch_seed: int | None = None  # the launch this outcome is of (its window drift: Noise.drift)
    ran_as: tuple[tuple[str, Any], ...] = ()  # options SGLang runs otherwise than asked (dest, value as run)

    def decode_tok_s(self, concurrency: float, saturation_c: float) -> float:
        """Aggregate decode tok/s with ``concurrency`` requests in the server (base value at 16)."""
        def g(c: float) -> float:
            return c / (1.0 + c / saturation_c)

        return self.tok_s_c16 * self.noise_factor * g(max(concurrency, 1.0)) / g(16.0)

    def expected_tok_s(self, concurrency: int, output_len: int, saturation_c: float) -> float:
        """What a closed-loop benchmark measures: decode rate discounted by the TTFT of each request."""
        per_stream = self.decode_tok_s(concurrency, saturation_c) / concurrency
        cycle = self.ttft_ms / 1000.0 + (output_len - 1) / per_stream
        return concurrency * output_len / cycle


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario; ConfigError (one line, key path) on any problem."""
    p = Path(path)
    data = read_yaml(p, "scenario")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(p), exc)) from exc


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def matches_value(pattern: Any, value: Any) -> bool:
    """Does one option value match one pattern (see module docstring)?"""
    if isinstance(pattern, list):
        return any(matches_value(p, value) for p in pattern)
    if pattern is None:
        return value is None
    if value is None:
        return False
    if isinstance(pattern, bool) or isinstance(value, bool):
        return str(pattern).lower() == str(value).lower()
    if isinstance(pattern, str):
        for op in ("<=", ">=", "!=", "<", ">"):
            if pattern.startswith(op):
                rhs = pattern[len(op):].strip()
                a, b = _num(value), _num(rhs)
                if op == "!=":
                    if a is not None and b is not None:
                        return a != b
                    return not matches_value(rhs, value) if any(ch in rhs for ch in "*?[") else str(value) != rhs
                if a is None or b is None:
                    return False
                return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        if any(ch in pattern for ch in "*?["):
            return fnmatch.fnmatchcase(str(value), pattern)
        return str(value) == pattern
    a = _num(value)
    return a is not None and a == float(pattern)


def rule_matches(match: dict[str, Any], options: dict[str, Any], env: dict[str, str]) -> bool:
    """All keys of ``match`` hold for these parsed options (by dest) and environment."""
    for key, pattern in match.items():
        value = env.get(key[4:]) if key.startswith("env.") else options.get(key)
        if not matches_value(pattern, value):
            return False
    return True


def _adjust(current: float, how: Adjust | None) -> float:
    if how is None:
        return current
    if isinstance(how, int | float):
        return current * float(how)
    text = how.strip()
    if text.startswith("="):
        return float(text[1:])
    if text.startswith(("+", "-")):
        return current + float(text)
    if text.startswith(("x", "*")):
        return current * float(text[1:])
    return current * float(text)


def resolve(scenario: Scenario, options: dict[str, Any], env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The options as SGLang runs them (the scenario's adjustments applied, in order) and the lines it
    prints about them."""
    asked, resolved, lines = dict(options), dict(options), []
    for adjustment in scenario.adjustments:
        if rule_matches(adjustment.match, resolved, env):
            resolved.update(adjustment.sets)
            if adjustment.log:
                lines.append(adjustment.log.format_map(asked))
    return resolved, lines


def evaluate(scenario: Scenario, options: dict[str, Any], env: dict[str, str],
             launch_seed: int | None = None) -> Outcome:
    """The modelled outcome of a configuration, from parsed options (dest names, defaults filled);
    with ``launch_seed``, one launch of it (run-to-run noise included)."""
    tok_s, ttft, startup, accept = (scenario.base.tok_s_c16, scenario.base.ttft_ms,
                                    scenario.base.startup_s, scenario.base.accept_len)
    asked = options
    options, notices = resolve(scenario, options, env)
    kernels = dict(scenario.kernels)
    matched: list[dict[str, Any]] = []
    for effect in scenario.effects:
        if rule_matches(effect.match, options, env):
            matched.append(effect.match)
            notices += [effect.log] if effect.log else []
            kernels.update(effect.kernels)
            tok_s = _adjust(tok_s, effect.tok_s)
            ttft = _adjust(ttft, effect.ttft_ms)
            startup = _adjust(startup, effect.startup_s)
            accept = _adjust(accept, effect.accept_len)
    failure = next((f for f in scenario.failures if rule_matches(f.match, options, env)), None)
    noise = scenario.noise.own_deviation(matched) * scenario.noise.launch_factor(launch_seed)
    return Outcome(tok_s_c16=max(tok_s, 1e-6), ttft_ms=max(ttft, 0.0), startup_s=max(startup, 0.0),
                   accept_len=max(accept, 1.0), failure=failure, noise_factor=noise, notices=tuple(notices),
                   kernels=tuple(kernels.items()), launch_seed=launch_seed,
                   ran_as=tuple((k, v) for k, v in options.items() if k not in asked or asked[k] != v))
