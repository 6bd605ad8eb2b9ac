"""The YAML search-space format (documented in docs/search-spaces.md), validated with pydantic.

This module only checks the *shape* of the file; :mod:`tuner.space` compiles it into parameters
and checks every setting against SGLang's flag table. Errors are one line:
``<file>: <key.path>: <what is wrong> (<what is allowed>)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.errors import ConfigError
from core.types import BenchConfig, GatePrompt, Objective
from core.validation import format_validation_error, parse_yaml, read_text

Scalar = str | int | float | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParamSpec(_Strict):
    """One tunable parameter: ``choices`` (list or composite mapping), ``int`` or ``float`` range."""

    choices: list[Scalar] | dict[str, dict[str, Any] | None] | None = None
    int_range: tuple[int, int] | None = Field(default=None, alias="int")
    float_range: tuple[float, float] | None = Field(default=None, alias="float")
    step: float | None = None
    log: bool = False
    flag: str | None = None
    env: str | None = None
    when: dict[str, Scalar | list[Scalar]] | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one_kind(self) -> ParamSpec:
        kinds = [k for k, v in (("choices", self.choices), ("int", self.int_range),
                                ("float", self.float_range)) if v is not None]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of choices, int, float (got {', '.join(kinds) or 'none'})")
        rng = self.int_range or self.float_range
        if rng is not None and rng[0] > rng[1]:
            raise ValueError(f"range min {rng[0]} is greater than max {rng[1]}")
        if self.log and rng is not None and rng[0] <= 0:
            raise ValueError(f"a log range needs min > 0 (got {rng[0]})")
        if self.choices is not None and len(self.choices) == 0:
            raise ValueError("choices is empty")
        if self.flag and self.env:
            raise ValueError("give flag or env, not both")
        return self


_BENCH = BenchConfig()


class BenchmarkSpec(_Strict):
    """The ``benchmark:`` section; its defaults are :class:`core.types.BenchConfig`'s (C16, 1024 in,
    256 out, 20 s warm-up, 60 s window), the one place they are written."""

    concurrency: Annotated[int, Field(ge=1)] = _BENCH.concurrency
    input_len: Annotated[int, Field(ge=1)] = _BENCH.input_len
    output_len: Annotated[int, Field(ge=2)] = _BENCH.output_len
    warmup_s: Annotated[float, Field(ge=0)] = _BENCH.warmup_s
    duration_s: Annotated[float, Field(gt=0)] = _BENCH.duration_s
    repeats: Annotated[int, Field(ge=1)] = _BENCH.repeats
    api: Literal["generate", "completions"] = "generate"
    request_timeout_s: Annotated[float, Field(gt=0)] = _BENCH.request_timeout_s
    max_failed_fraction: Annotated[float, Field(ge=0, le=1)] = _BENCH.max_failed_fraction
    early_stop_window_s: Annotated[float, Field(gt=0)] | None = _BENCH.early_stop_window_s
    early_stop_fraction: Annotated[float, Field(gt=0, le=1)] = 0.8

    @model_validator(mode="after")
    def _early_window_inside(self) -> BenchmarkSpec:
        if self.early_stop_window_s is not None and self.early_stop_window_s >= self.duration_s:
            raise ValueError(f"early_stop_window_s ({self.early_stop_window_s:g}) must be shorter than "
                             f"duration_s ({self.duration_s:g})")
        return self


class GatePromptSpec(_Strict):
    """One gate prompt with an optional expected substring or regex."""

    text: str
    expect: str | None = None
    expect_regex: str | None = None
    max_new_tokens: Annotated[int, Field(ge=1)] = GatePrompt.max_new_tokens


class GateSpec(_Strict):
    """The ``gate:`` section."""

    enabled: bool = True
    prompts: list[GatePromptSpec] = Field(default_factory=list)


class RooflineSpec(_Strict):
    """Optional: the hardware limit for tok/s@C16 on one GPU group, shown next to every result."""

    tok_s: Annotated[float, Field(gt=0)]
    note: str = ""


class SpaceFile(_Strict):
    """The whole search-space file."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    description: str = ""
    engine: Literal["sglang", "sim"] = "sglang"
    scenario: str | None = None
    sglang_python: str | None = None
    sglang_version: str | None = None
    gpu: str | None = None
    gpus_per_trial: Annotated[int, Field(ge=1)] = 1
    startup_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    base: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    forbid: list[dict[str, Scalar | list[Scalar]]] = Field(default_factory=list)
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec)
    gate: GateSpec = Field(default_factory=GateSpec)
    roofline: RooflineSpec | None = None
    objective: Objective = Objective.PER_SERVER  # per_gpu: tok/s@C16 divided by the GPUs a server uses
    slo: str | None = None  # e.g. "ttft_p99<2s,itl_p99<50ms,per_user_tok_s>30" (core.slo); --slo overrides

    @field_validator("gpu")
    @classmethod
    def _gpu_arch(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sm_"):
            raise ValueError(f"{value!r} is not a GPU architecture (use sm_90, sm_100, sm_120, ...)")
        return value

    @model_validator(mode="after")
    def _sim_needs_scenario(self) -> SpaceFile:
        if self.engine == "sim" and not self.scenario:
            raise ValueError("engine: sim needs a scenario: file")
        return self


def load_space_file(path: str | Path) -> tuple[SpaceFile, str]:
    """Read and shape-check a space file; returns the model and the raw YAML text."""
    p = Path(path)
    text = read_text(p)
    data = parse_yaml(text, str(p))
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: (top level): expected a mapping of keys, got {type(data).__name__}")
    try:
        return SpaceFile.model_validate(data), text
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(p), exc)) from exc
