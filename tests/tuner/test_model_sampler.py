"""The model sampler on a study built by hand (real Optuna trials, the e2e space): it proposes what
the model expects to pay, never what is measured or blocked, and flags a reading far below what it
expects of a configuration near the best."""

from __future__ import annotations

import itertools
from typing import Any

import optuna

from tests.conftest import FIXTURES
from tuner.model_sampler import PairwiseModelSampler
from tuner.space_loader import load_space

SPACE = load_space(FIXTURES / "e2e-space.yaml")


def value(p: dict[str, Any]) -> float:
    """An additive landscape with one pair that pays only together (fast + triton)."""
    v = 10.0 * (1.3 if p["checkpoint"] == "fast" else 1.0) * {"auto": 1.0, "triton": 1.05, "marlin": 0.9}[
        p["moe_runner_backend"]] * (0.8 if p["ep_size"] == 2 else 1.0) * {16: 1.0, 32: 1.04, 64: 0.97}[
        p["cuda_graph_max_bs"]]
    return v * (1.2 if p["checkpoint"] == "fast" and p["moe_runner_backend"] == "triton" else 1.0)


def study_with(measured: list[dict[str, Any]], readings: dict[int, float] | None = None) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    dists = {p.name: p.distribution() for p in SPACE.params}
    for i, params in enumerate(measured):
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                  value=(readings or {}).get(i, value(params)),
                                                  user_attrs={"status": "ok"}))
    return study


def all_configs() -> list[dict[str, Any]]:
    return [dict(zip(("checkpoint", "moe_runner_backend", "ep_size", "cuda_graph_max_bs"), c, strict=True))
            for c in itertools.product(("slow", "fast"), ("auto", "triton", "marlin"), (1, 2), (16, 32, 64))]


def test_it_proposes_an_unmeasured_configuration_the_model_expects_to_pay() -> None:
    configs = all_configs()
    best = max(configs, key=value)
    seen = [c for c in configs if c != best][::3]
    study = study_with(seen)
    sampler = PairwiseModelSampler(SPACE, blocked=lambda p: False, seed=0)
    proposal = sampler.propose(study.get_trials(), number=len(seen))
    assert proposal is not None and proposal not in seen
    assert value(proposal) >= sorted(map(value, configs))[-6], "one of the six best of 36"
    blocked = PairwiseModelSampler(SPACE, blocked=lambda p: p == proposal, seed=0)
    assert blocked.propose(study.get_trials(), number=len(seen)) != proposal


def test_a_low_reading_near_the_best_is_a_surprise_and_a_plain_one_is_not() -> None:
    configs = all_configs()
    best = max(configs, key=value)
    others = [c for c in configs if c != best][::2]
    sampler = PairwiseModelSampler(SPACE, blocked=lambda p: False, seed=0)
    low = study_with([*others, best], readings={len(others): value(best) * 0.6})
    expected = sampler.surprise(low.get_trials(), number=len(others))
    assert expected is not None and expected > value(best) * 0.8
    plain = study_with([*others, best])
    assert sampler.surprise(plain.get_trials(), number=len(others)) is None
