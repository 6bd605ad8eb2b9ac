"""One setting at a time, from the first values: the search people do by hand, and SGLang's own
auto-benchmark. A baseline for comparisons (``--sampler coordinate``), not the default.

From the configuration with every parameter at its first value, try each value of the first
parameter with the others held; keep the best; go on to the next parameter; start over when all
were tried once. Derived from the study's trials each time, so it resumes like any sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from core.errors import ConfigError
from tuner.model_sampler import _history, _key
from tuner.space import SearchSpace

Params = dict[str, Any]
PASSES = 3


class CoordinateSampler(BaseSampler):
    """One-setting-at-a-time search over ``space`` (see module docstring)."""

    def __init__(self, space: SearchSpace, blocked: Callable[[Params], bool]) -> None:
        self.space = space
        self.blocked = blocked
        self._fallback = RandomSampler(seed=0)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """Every parameter: proposals are whole configurations."""
        return {p.name: p.distribution() for p in self.space.params}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """The next untried variant along the current parameter."""
        if not search_space:
            return {}
        return self.propose(study.get_trials(deepcopy=False), trial.number) or {}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        """Only reached when the search is over: a random value."""
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)

    def propose(self, trials: Sequence[FrozenTrial], number: int) -> Params | None:
        """Walk the passes from the first values; the first variant not tried yet."""
        measured, failed, running = _history(trials, number)
        tried = {*measured, *map(_key, failed), *map(_key, running)}
        current = self.space.from_assignments({}).params
        for _ in range(PASSES):
            for param in self.space.params:
                if param.name not in current:
                    continue
                variants = self._variants(current, param.name)
                for v in variants:
                    if _key(v) not in tried and not self.blocked(v):
                        return v
                scored = [(measured[_key(v)], v) for v in variants if _key(v) in measured]
                if scored:
                    current = max(scored, key=lambda sv: sv[0])[1]
        return None

    def _variants(self, current: Params, name: str) -> list[Params]:
        out = []
        param = next(p for p in self.space.params if p.name == name)
        for value in param.values() or []:
            try:
                out.append(self.space.from_assignments({**current, name: value}).params)
            except ConfigError:  # forbidden: skip
                continue
        return out
