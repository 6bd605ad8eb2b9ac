"""Samplers that propose whole configurations of a search space (not one parameter at a time), and
what they read from the study: which configurations were measured, failed, or are in flight."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from core.types import RunStatus
from tuner.space import SearchSpace

Params = dict[str, Any]
Key = tuple[tuple[str, Any], ...]
PASS_MARK = "one_setting_pass"  # a trial's system attribute: its configuration came from the one-setting pass


def queued(trial: FrozenTrial) -> bool:
    """Was ``trial`` queued with its settings (``enqueue_trial``: a re-measure, a retry), rather than
    proposed by the sampler?"""
    return "fixed_params" in trial.system_attrs


class WholeConfigSampler(BaseSampler):
    """Optuna's sampler interface over :meth:`propose`: every parameter is in the relative search
    space, so a proposal fixes them all (inactive conditional ones are simply never suggested)."""

    space: SearchSpace
    _fallback: BaseSampler = RandomSampler(seed=0)
    # set by :meth:`propose` to a system attribute the proposed trial gets (:data:`PASS_MARK`), or None
    _mark: str | None = None

    def propose(self, trials: Sequence[FrozenTrial], number: int) -> Params | None:
        """The configuration for trial ``number`` given the study's trials (None: nothing left)."""
        raise NotImplementedError

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """Every parameter of the space."""
        return {p.name: p.distribution() for p in self.space.params}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        """The proposal ({} when there is none)."""
        if not search_space:
            return {}
        self._mark = None
        params = self.propose(study.get_trials(deepcopy=False), trial.number) or {}
        if params and self._mark is not None and not queued(trial):
            study._storage.set_trial_system_attr(trial._trial_id, self._mark, True)
        return params

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        """Only reached when nothing was proposed: a random value."""
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)


def config_key(params: Params) -> Key:
    """A hashable identity of a parameter assignment."""
    return tuple(sorted(params.items()))


def history(trials: Sequence[FrozenTrial], number: int) -> tuple[dict[Key, float], list[Params], list[Params]]:
    """Measured configurations (key -> mean tok/s), failed ones, and ones in flight (trial ``number``
    and trials without parameters, such as the baseline, left out)."""
    values: dict[Key, list[float]] = {}
    failed: list[Params] = []
    running: list[Params] = []
    for t in trials:
        if not t.params or t.number == number:
            continue
        if t.state == TrialState.RUNNING:
            running.append(dict(t.params))
        elif t.state == TrialState.COMPLETE and t.value is not None:
            if t.user_attrs.get("status") in (RunStatus.OK, RunStatus.CACHED) and t.value > 0:
                values.setdefault(config_key(t.params), []).append(float(t.value))
            else:
                failed.append(dict(t.params))
    measured = {k: sum(set(v)) / len(set(v)) for k, v in values.items()}
    return measured, failed, running
