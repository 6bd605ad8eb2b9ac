"""External black-box optimizers as sweep strategies, for the comparison in docs/performance.md.

``smac``: SMAC3's random-forest Bayesian optimisation (HyperparameterOptimizationFacade) over the
space's parameters as a ConfigSpace (conditions included), driven by ask/tell from inside an Optuna
sampler: each proposal is SMAC's next configuration; each finished trial is told as cost
``-log(tok/s)``, an infeasible one as SMAC's crash cost. Registered with
:func:`tuner.sampler.register_strategy` when ``smac`` imports (it is not a dependency of the tool).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from tuner.sampler import Blocked, register_strategy
from tuner.space import SearchSpace
from tuner.whole_config import WholeConfigSampler

CRASH_COST = 10.0  # -log(tok/s) of a failure: worse than any measured configuration


def _config_space(space: SearchSpace, seed: int) -> Any:
    from ConfigSpace import Categorical, ConfigurationSpace, EqualsCondition, InCondition

    cs = ConfigurationSpace(seed=seed)
    hps = {}
    for p in space.params:
        values = p.values() or []
        hps[p.name] = Categorical(p.name, [str(v) for v in values])
        cs.add(hps[p.name])
    for p in space.params:
        for parent, allowed in p.conditions:
            labels = [str(v) for v in allowed]
            cond = (EqualsCondition(hps[p.name], hps[parent], labels[0]) if len(labels) == 1
                    else InCondition(hps[p.name], hps[parent], labels))
            cs.add(cond)
    return cs


class SMACSampler(WholeConfigSampler):
    """SMAC3 behind Optuna's sampler interface (see module docstring)."""

    def __init__(self, space: SearchSpace, blocked: Blocked, seed: int | None) -> None:
        from smac import HyperparameterOptimizationFacade, Scenario

        self.space, self.blocked = space, blocked
        self.values = {p.name: {str(v): v for v in p.values() or []} for p in space.params}
        scenario = Scenario(_config_space(space, seed or 0), deterministic=False, n_trials=10_000, seed=seed or 0,
                            crash_cost=CRASH_COST, output_directory=tempfile.mkdtemp(prefix="smac-"))
        initial = HyperparameterOptimizationFacade.get_initial_design(scenario, n_configs=6)
        self.smac = HyperparameterOptimizationFacade(scenario, target_function=lambda config, seed=0: 0.0,
                                                     initial_design=initial, overwrite=True, logging_level=False)
        self.pending: dict[int, Any] = {}
        self._fallback = RandomSampler(seed=seed)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        from smac.runhistory.dataclasses import TrialValue

        for _ in range(50):
            info = self.smac.ask()
            params = {k: self.values[k][str(v)] for k, v in dict(info.config).items()}
            if not self.blocked(params):
                self.pending[trial.number] = info
                return params
            self.smac.tell(info, TrialValue(cost=CRASH_COST))  # a known failure: told, never launched
        return {}

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        from smac.runhistory.dataclasses import TrialValue

        info = self.pending.pop(trial.number, None)
        if info is None:
            return
        ok = state == TrialState.COMPLETE and values and values[0] > 0
        self.smac.tell(info, TrialValue(cost=-math.log(values[0]) if ok and values else CRASH_COST))


def register() -> list[str]:
    """Register the external strategies that import here; their names."""
    names = []
    try:
        import smac  # noqa: F401

        register_strategy("smac", lambda space, blocked, learned, seed: SMACSampler(space, blocked, seed))
        names.append("smac")
    except ImportError:
        pass
    return names
