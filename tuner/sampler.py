"""An Optuna sampler wrapper that never returns a combination a ``forbid`` rule excludes.

It delegates to an inner sampler (TPE by default) and redraws a value that would complete a
forbidden combination with the parameters already decided for the trial (those suggested so far
plus the jointly sampled "relative" ones). After ``max_redraws`` it picks uniformly among the
allowed values. The study loop calls ask/sample/tell from one thread, so the per-trial memory of
relative parameters needs no lock.

With ``multivariate=True`` the jointly sampled parameters are those every finished trial *that has
parameters* shares. The sweep's baseline trial (base settings only) has none; left in, it would make
that intersection empty and silently turn multivariate TPE into independent sampling.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from core.errors import ConfigError
from core.slo import Slo
from tuner.rule_book import RuleBook
from tuner.space import SearchSpace


class ForbidAwareSampler(BaseSampler):
    """Wraps ``inner``; ``violates(params)`` says whether a (partial) assignment is forbidden."""

    def __init__(self, inner: BaseSampler, violates: Callable[[dict[str, Any]], bool],
                 max_redraws: int = 32, seed: int | None = None, multivariate: bool = False) -> None:
        self._inner = inner
        self._multivariate = multivariate
        self._violates = violates
        self._max_redraws = max_redraws
        self._rng = random.Random(seed)
        self._relative: dict[int, dict[str, Any]] = {}

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """Multivariate: the parameters shared by every finished trial that has any; else delegated."""
        if not self._multivariate:
            return self._inner.infer_relative_search_space(study, trial)
        finished = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
                    if t.params]
        if not finished:
            return {}
        shared = optuna.search_space.intersection_search_space(finished, include_pruned=True)
        return {name: dist for name, dist in sorted(shared.items()) if not dist.single()}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """Joint sample from the inner sampler, redrawn while it is forbidden on its own."""
        for _ in range(self._max_redraws):
            params = self._inner.sample_relative(study, trial, search_space)
            if not self._violates(params):
                self._relative[trial.number] = dict(params)
                return params
        self._relative[trial.number] = {}
        return {}

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        """One value from the inner sampler, redrawn while it completes a forbidden combination."""
        decided = {**self._relative.get(trial.number, {}), **trial.params}
        value = None
        for _ in range(self._max_redraws):
            value = self._inner.sample_independent(study, trial, param_name, param_distribution)
            if not self._violates({**decided, param_name: value}):
                return value
        if isinstance(param_distribution, CategoricalDistribution):
            allowed = [c for c in param_distribution.choices
                       if not self._violates({**decided, param_name: c})]
            if allowed:
                return self._rng.choice(allowed)
        return value

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        """Delegated."""
        self._inner.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        """Delegated; forgets the trial's relative parameters."""
        self._relative.pop(trial.number, None)
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Delegated."""
        self._inner.reseed_rng()


Blocked = Callable[[dict[str, Any]], bool]
StrategyFactory = Callable[[SearchSpace, Blocked, "RuleBook | None", "int | None"], BaseSampler]
DEFAULT_STRATEGY = "model"


def _model(one_pass_first: bool, trust_region: bool = False, dense: bool = False,
           explore: bool = False) -> StrategyFactory:
    def factory(space: SearchSpace, blocked: Blocked, learned: RuleBook | None, seed: int | None) -> BaseSampler:
        from tuner.model_sampler import EXPLORE_EVERY, PairwiseModelSampler

        return PairwiseModelSampler(space, blocked, learned.feasibility if learned else None, seed=seed,
                                    epoch=(lambda: learned.epoch) if learned else None,
                                    start_with_one_pass=one_pass_first, trust_region=trust_region, dense=dense,
                                    explore_every=EXPLORE_EVERY if explore else 0,
                                    judge=learned.judge if learned else None)

    return factory


def _coordinate(space: SearchSpace, blocked: Blocked, learned: RuleBook | None, seed: int | None) -> BaseSampler:
    from tuner.coordinate import CoordinateSampler

    return CoordinateSampler(space, blocked)


def _optuna(make: Callable[[int | None], BaseSampler], multivariate: bool = False) -> StrategyFactory:
    """One of Optuna's samplers, made forbid-aware (and aware of the learned rules)."""
    def factory(space: SearchSpace, blocked: Blocked, learned: RuleBook | None, seed: int | None) -> BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return ForbidAwareSampler(make(seed), blocked, seed=seed, multivariate=multivariate)

    return factory


def _gp(seed: int | None) -> BaseSampler:
    return optuna.samplers.GPSampler(seed=seed, deterministic_objective=False)


STRATEGIES: dict[str, StrategyFactory] = {
    "model": _model(one_pass_first=True),
    "model-only": _model(one_pass_first=False),
    "model-local": _model(one_pass_first=True, trust_region=True),
    "model-dense": _model(one_pass_first=True, dense=True),
    "model-explore": _model(one_pass_first=True, explore=True),
    "tpe": _optuna(lambda seed: optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                                           n_startup_trials=8), multivariate=True),
    "random": _optuna(lambda seed: optuna.samplers.RandomSampler(seed=seed)),
    "coordinate": _coordinate,
    "gp": _optuna(_gp),
}
NEEDS = {"gp": "torch"}  # strategies that need a package the tuner does not install


def register_strategy(name: str, factory: StrategyFactory, needs: str | None = None) -> None:
    """Make ``--sampler name`` use ``factory(space, blocked, learned_rules, seed)`` (benchmarks add
    external optimizers this way)."""
    STRATEGIES[name] = factory
    if needs:
        NEEDS[name] = needs


def check_strategy(name: str | None) -> None:
    """ConfigError, before anything starts, for an unknown strategy or one whose package is missing."""
    import importlib.util

    if name is None:
        return
    if name not in STRATEGIES:
        raise ConfigError(f"--sampler {name}: unknown strategy (choose from {', '.join(STRATEGIES)})")
    if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
        raise ConfigError(f"--sampler {name}: needs the {NEEDS[name]} package (pip install {NEEDS[name]})")


def make_sampler(space: SearchSpace, learned: RuleBook | None = None, seed: int | None = None,
                 strategy: str | None = None, slos: tuple[Slo, ...] = (), budget: int | None = None) -> BaseSampler:
    """The sampler of a sweep over ``space``; ``learned`` failure rules are avoided like ``forbid`` rules.

    ``model`` (default): one pass of one-setting-at-a-time moves from the first values, then
    :class:`tuner.model_sampler.PairwiseModelSampler` with the spike-and-slab model of
    :mod:`tuner.pair_model` (``model-dense``: the dense pairwise GP instead; ``model-only``: the model
    from the start; ``model-local``: within two settings of the best measured, a trust region;
    ``model-explore``: every fifth trial after the pass measures untried pairs of settings, until
    the budget's last quarter).
    ``tpe``: multivariate TPE
    with constant liar (the earlier default). ``random``. ``coordinate``: one setting at a time from
    the first values (:class:`tuner.coordinate.CoordinateSampler`, what SGLang's auto-benchmark does).
    ``gp``: Optuna's GPSampler (needs torch). The comparison is in docs/performance.md. ``slos``: the
    sweep's objectives, which the model sampler predicts from the measured metrics; ``budget``: the
    sweep's launches, which the model sampler paces its space-filling proposals by.
    """
    name = strategy or DEFAULT_STRATEGY
    check_strategy(name)

    def blocked(params: dict[str, Any]) -> bool:
        return space.violates(params) or (learned is not None and learned.blocks(params))

    sampler = STRATEGIES[name](space, blocked, learned, seed)
    if slos and hasattr(sampler, "slos"):  # the model sampler weighs proposals by their chance to meet them
        sampler.slos = slos
    if budget is not None and hasattr(sampler, "budget"):
        sampler.budget = budget
    return sampler
