"""A compiled search space: parameters (categorical, int, float, composite, conditional), forbid
rules, and the fixed base settings. It samples a :class:`~core.types.Config` from an Optuna
trial (define-by-run), enumerates the space, and checks every setting against a flag table.

Parameter names are stable: a top-level parameter keeps its YAML name; a parameter nested under a
composite choice is named ``<parent>.<choice>.<key>``. Later settings override earlier ones:
base < parameters in file order.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from core.errors import ConfigError
from core.hardware import Pruned
from core.types import BenchConfig, Config, EngineKind, EngineSpec, GateConfig, GatePrompt
from tuner.space_file import SpaceFile

ENUMERATION_CAP = 1_000_000
LISTING_KEPT = 60_000  # a space of up to this many configurations keeps their listing (the model's candidates)


class ForbiddenConfig(ConfigError):
    """The sampled combination is excluded by a ``forbid`` rule (only when no allowed value was left)."""


@dataclass(frozen=True)
class Settings:
    """Fixed SGLang settings (dest names) and environment variables."""

    flags: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Param:
    """One parameter as Optuna sees it. ``options`` holds a composite choice's settings by label."""

    name: str
    path: str
    kind: str  # categorical | int | float
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    log: bool = False
    target: tuple[str, str] | None = None  # ("flag", dest) | ("env", VAR); None for composite
    options: dict[str, Settings] = field(default_factory=dict)
    conditions: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def active(self, params: dict[str, Any]) -> bool:
        """True when every parent parameter was sampled with one of the values this one lives under."""
        return all(name in params and params[name] in values for name, values in self.conditions)

    def flags_for(self, value: Any) -> dict[str, Any]:
        """The SGLang settings (dest names) this parameter sets with ``value`` (none for an env variable)."""
        if self.target is None:
            return dict(self.options[value].flags)
        return {self.target[1]: value} if self.target[0] == "flag" else {}

    def values(self) -> list[Any] | None:
        """Every value of a finite parameter, or None for a continuous one."""
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "int":
            step = int(self.step or 1)
            return list(range(int(self.low), int(self.high) + 1, step))
        if self.step:
            n = round((self.high - self.low) / self.step)
            return [round(self.low + i * self.step, 10) for i in range(n + 1)]
        return None

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution this parameter is sampled from."""
        if self.kind == "categorical":
            return CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def suggest(self, trial: optuna.Trial) -> Any:
        """Sample this parameter from ``trial``."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high),
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space. Build it with :func:`load_space`."""

    file: SpaceFile
    path: str
    text: str
    base: Settings
    params: tuple[Param, ...]
    forbid: tuple[dict[str, tuple[Any, ...]], ...]
    pruned: tuple[Pruned, ...] = ()

    @property
    def name(self) -> str:
        """The space's name (the default study name)."""
        return self.file.name

    # ---- sampling -------------------------------------------------------------------------
    def build(self, choose: Callable[[Param, dict[str, Any]], Any]) -> Config:
        """Walk the parameters in order; ``choose(param, params_so_far)`` gives each active value."""
        params: dict[str, Any] = {}
        flags = dict(self.base.flags)
        env = dict(self.base.env)
        for param in self.params:
            if not param.active(params):
                continue
            value = choose(param, params)
            params[param.name] = value
            if param.target is None:
                opt = param.options[value]
                flags.update(opt.flags)
                env.update(opt.env)
            elif param.target[0] == "env":
                env[param.target[1]] = str(value)
            else:
                flags[param.target[1]] = value
        if self.violates(params):
            raise ForbiddenConfig(f"{self.path}: forbid: every value left is forbidden after {params}")
        return Config(params=params, flags=flags, env=env)

    def fixed_flags(self) -> frozenset[str]:
        """The base settings (dest names) no parameter can change: every configuration has them alike."""
        varied = {dest for p in self.params for value in (p.choices if p.target is None else ())
                  for dest in p.options[value].flags}
        varied |= {p.target[1] for p in self.params if p.target is not None and p.target[0] == "flag"}
        return frozenset(self.base.flags) - varied

    def sample(self, trial: optuna.Trial) -> Config:
        """Sample a configuration from an Optuna trial (define-by-run)."""
        return self.build(lambda p, _: p.suggest(trial))

    def from_params(self, params: dict[str, Any]) -> Config:
        """Rebuild the configuration of recorded params (missing params: ConfigError)."""
        def choose(p: Param, _: dict[str, Any]) -> Any:
            if p.name not in params:
                raise ConfigError(f"{self.path}: params.{p.name}: no value recorded for this parameter")
            return params[p.name]

        return self.build(choose)

    def from_assignments(self, assigned: dict[str, Any]) -> Config:
        """A configuration with the given values; unset active params take their first value."""
        def choose(p: Param, _: dict[str, Any]) -> Any:
            if p.name not in assigned:
                return p.choices[0] if p.kind == "categorical" else (
                    int(p.low) if p.kind == "int" else p.low)
            value = assigned[p.name]
            finite = p.values()
            if (finite is not None and value not in finite) or (finite is None and not p.low <= value <= p.high):
                shown = ", ".join(map(str, finite[:12])) if finite else f"[{p.low}, {p.high}]"
                raise ConfigError(f"--set {p.name}={value}: not a value of {p.name} ({shown})")
            return value

        unknown = set(assigned) - {p.name for p in self.params}
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigError(f"--set {name}: unknown parameter (parameters: "
                              f"{', '.join(p.name for p in self.params)})")
        return self.build(choose)

    def moves(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Every configuration one or two settings away from ``params`` (forbidden ones left out)."""
        singles = [{p.name: v} for p in self.params for v in p.values() or [] if params.get(p.name) != v]
        out: list[dict[str, Any]] = []
        for i, a in enumerate(singles):
            for b in [{}, *singles[i + 1:]]:
                if set(a) & set(b):
                    continue
                try:
                    out.append(self.from_assignments({**params, **a, **b}).params)
                except ConfigError:  # forbidden
                    continue
        return out

    def baseline(self) -> Config:
        """The base settings alone (SGLang's defaults for everything else)."""
        return Config(params={}, flags=dict(self.base.flags), env=dict(self.base.env))

    def violates(self, params: dict[str, Any]) -> bool:
        """True when a forbid rule whose parameters were all sampled matches ``params``."""
        return any(
            all(k in params and params[k] in vals for k, vals in rule.items()) for rule in self.forbid
        )

    # ---- size -----------------------------------------------------------------------------
    def iter_configs(self) -> Iterator[dict[str, Any]]:
        """Every allowed parameter assignment (finite spaces only; continuous params raise)."""
        def walk(i: int, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
            if self.violates(params):
                return
            if i == len(self.params):
                yield dict(params)
                return
            param = self.params[i]
            if not param.active(params):
                yield from walk(i + 1, params)
                return
            values = param.values()
            if values is None:
                raise ConfigError(f"{param.path}: continuous parameter: the space cannot be enumerated")
            for value in values:
                params[param.name] = value
                yield from walk(i + 1, params)
                del params[param.name]

        yield from walk(0, {})

    def cardinality(self) -> int | float:
        """Number of allowed configurations; ``math.inf`` for continuous or > ENUMERATION_CAP spaces."""
        return self._counted[0]

    def listing(self) -> tuple[dict[str, Any], ...] | None:
        """Every allowed configuration (not to be modified), for a space of at most LISTING_KEPT; else None."""
        return self._counted[1]

    @functools.cached_property
    def _counted(self) -> tuple[int | float, tuple[dict[str, Any], ...] | None]:
        # listed once, as it is counted: a space does not change
        if any(p.values() is None for p in self.params):
            return math.inf, None
        kept: list[dict[str, Any]] = []
        count = 0
        for params in self.iter_configs():
            count += 1
            if count > ENUMERATION_CAP:
                return math.inf, None
            if count <= LISTING_KEPT:
                kept.append(params)
        return count, tuple(kept) if count <= LISTING_KEPT else None

    # ---- runtime settings -----------------------------------------------------------------
    def engine(self, python_override: str | None = None) -> EngineSpec:
        """Which server program trials launch."""
        scenario = None
        if self.file.scenario:
            scenario = str((Path(self.path).parent / self.file.scenario).resolve())
        default_python = sys.executable if EngineKind(self.file.engine) == EngineKind.SIM else "python3"
        return EngineSpec(
            kind=EngineKind(self.file.engine), python=python_override or self.file.sglang_python or default_python,
            scenario=scenario, sglang_version=self.file.sglang_version,
        )

    def bench_config(self, best_tok_s: float | None = None) -> BenchConfig:
        """The benchmark settings of the space; with early stopping on and a best result so far, a run
        below ``early_stop_fraction`` x that best after ``early_stop_window_s`` stops early."""
        spec = self.file.benchmark.model_dump(exclude={"early_stop_fraction"})
        cfg = BenchConfig(**spec)
        if cfg.early_stop_window_s and best_tok_s:
            cfg = replace(cfg, early_stop_below_tok_s=best_tok_s * self.file.benchmark.early_stop_fraction)
        return cfg

    def gate_config(self) -> GateConfig:
        """The correctness gate of the space."""
        prompts = tuple(GatePrompt(**p.model_dump()) for p in self.file.gate.prompts)
        return GateConfig(prompts=prompts, enabled=self.file.gate.enabled)
