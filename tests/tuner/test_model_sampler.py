"""The model sampler on a study built by hand (real Optuna trials, the e2e space): it proposes what
the model expects to pay, never what is measured or blocked, and flags a reading far below what it
expects of a configuration near the best."""

from __future__ import annotations

import io
import itertools
import random
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from rich.console import Console
from threadpoolctl import threadpool_info, threadpool_limits

from tests.conftest import FIXTURES
from tuner.encoding import Encoding
from tuner.live import SweepView
from tuner.model_sampler import PairwiseModelSampler
from tuner.space_loader import load_space
from tuner.study import Sweep
from tuner.sweep_state import SweepOptions
from tuner.whole_config import PASS_MARK, queued
from workers.sim.offline import OfflineModel

SPACE = load_space(FIXTURES / "e2e-space.yaml")
DEEPSEEK_V3 = Path(__file__).parents[2] / "search_spaces" / "hard-deepseek-v3-h200.yaml"


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


def test_settings_apart_counts_a_conditional_choice_once() -> None:
    space = load_space(DEEPSEEK_V3)
    enc = Encoding(space)
    base = space.from_assignments({}).params
    mtp = space.from_assignments({"speculative": "mtp", "enable_two_batch_overlap": True}).params
    assert mtp["speculative.mtp.speculative_num_steps"] == 1
    deeper = {**mtp, "speculative.mtp.speculative_num_steps": 2}
    rows = np.array([enc.encode(p) for p in (base, mtp, deeper)])
    # MTP on (whatever its three sub-settings) and two-batch overlap: two settings from the base;
    # between the two MTP configurations, the step count is the one setting that differs
    assert enc.settings_apart(rows, enc.encode(base)).tolist() == [0, 2, 2]
    assert enc.settings_apart(rows, enc.encode(mtp)).tolist() == [2, 0, 1]


def test_with_a_trust_region_it_stays_within_two_settings_of_the_best() -> None:
    # the DeepSeek-V3 space (10 settings) and its scenario's modelled values; without the trust region
    # expected improvement proposes 3-4 settings away from the best of 8 random measured configurations
    space = load_space(DEEPSEEK_V3)
    model = OfflineModel(DEEPSEEK_V3.parent / str(space.file.scenario))
    configs = list(space.iter_configs())
    dists = {p.name: p.distribution() for p in space.params}
    apart = []
    for seed in range(6):
        rng = random.Random(seed)
        seen: list[tuple[dict[str, Any], float]] = []
        while len(seen) < 8:
            params = rng.choice(configs)
            if tok_s := model.verdict(space.from_params(params), 16, 128).tok_s:
                seen.append((params, tok_s))
        study = optuna.create_study(direction="maximize")
        for params, tok_s in seen:
            study.add_trial(optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params},
                                                      value=tok_s, user_attrs={"status": "ok"}))
        sampler = PairwiseModelSampler(space, blocked=lambda p: False, seed=seed, trust_region=True)
        proposal = sampler.propose(study.get_trials(), number=len(seen))
        assert proposal is not None and proposal not in [p for p, _ in seen]
        best = max(seen, key=lambda pv: pv[1])[0]
        enc = sampler.enc
        apart.append(int(enc.settings_apart(enc.encode(proposal)[None, :], enc.encode(best))[0]))
    assert max(apart) <= 2, apart


def test_the_chance_to_run_is_worked_out_only_where_it_can_change_the_pick(monkeypatch: Any) -> None:
    import tuner.model_sampler as model_sampler

    configs = all_configs()
    sampler = PairwiseModelSampler(SPACE, blocked=lambda p: False, seed=0)
    rows = np.array([sampler.enc.encode(p) for p in configs])
    failed = [c for c in configs if c["moe_runner_backend"] == "marlin" and c["ep_size"] == 2][:3]
    ok = rows[[i for i, c in enumerate(configs) if c not in failed][::4]]
    score = np.random.default_rng(0).random(len(configs))
    full = score * sampler._feasibility(ok, failed)(rows)
    monkeypatch.setattr(model_sampler, "FEASIBILITY_BATCH", 4)
    pruned = sampler._discount_by_failures(score, rows, ok, failed)
    assert (pruned == 0).sum() > len(configs) // 2, "most candidates were never worked out"
    assert np.flatnonzero(pruned >= pruned.max() * (1 - 1e-9)).tolist() == \
        np.flatnonzero(full >= full.max() * (1 - 1e-9)).tolist(), "the best are the full product's best"


def test_a_failure_whose_log_states_the_value_it_needs_is_repaired_at_that_value() -> None:
    configs = all_configs()
    measured = [c for c in configs if c["moe_runner_backend"] != "marlin"][::3]
    study = study_with(measured)
    failing = {"checkpoint": "slow", "moe_runner_backend": "marlin", "ep_size": 1, "cuda_graph_max_bs": 32}
    reason = ("server exited with code 1 during startup: AssertionError: the marlin MoE runner supports "
              "cuda_graph_max_bs 64 only, got 32")
    study.add_trial(optuna.trial.create_trial(
        params=failing, distributions={p.name: p.distribution() for p in SPACE.params}, value=0.0,
        user_attrs={"status": "infeasible", "failure_kind": "config_error", "failure_reason": reason}))
    sampler = PairwiseModelSampler(SPACE, blocked=lambda p: False, seed=0)
    proposal = sampler.propose(study.get_trials(), number=len(measured) + 1)
    assert proposal == {**failing, "cuda_graph_max_bs": 64}, "the value the log states, in the failure's context"
    told = study_with(measured)
    told.add_trial(optuna.trial.create_trial(
        params=failing, distributions={p.name: p.distribution() for p in SPACE.params}, value=0.0,
        user_attrs={"status": "infeasible", "failure_kind": "config_error", "failure_reason": "killed"}))
    plain = PairwiseModelSampler(SPACE, blocked=lambda p: False, seed=0).propose(told.get_trials(), len(measured) + 1)
    assert plain != proposal, "without the line, the model does not pick it"


def test_exploring_every_fifth_proposal_measures_pairs_no_launch_had_together() -> None:
    # --sampler model-explore, on eight launches where the configuration farthest from all of them is not
    # the one with the most pairs of settings never launched together
    configs = all_configs()
    measured = random.Random(1).sample(configs, 8)
    study = study_with(measured)
    enc = PairwiseModelSampler(SPACE, blocked=lambda p: False).enc
    taken = np.array([enc.encode(c) for c in measured])
    seen = {pair for c in measured for pair in itertools.combinations(sorted(c.items()), 2)}
    rest = [c for c in configs if c not in measured]

    def nearest(p: dict[str, Any]) -> float:
        return float(enc.similarity(enc.encode(p)[None, :], taken).max())

    def new_pairs(p: dict[str, Any]) -> int:
        return sum(pair not in seen for pair in itertools.combinations(sorted(p.items()), 2))

    def proposal(number: int, budget: int | None = None, explore_every: int = 5,
                 feasibility: Any = None) -> dict[str, Any] | None:
        sampler = PairwiseModelSampler(SPACE, blocked=lambda p: False, feasibility=feasibility, seed=0,
                                       explore_every=explore_every)
        sampler.budget = budget
        return sampler.propose(study.get_trials(), number)

    fifth = proposal(4 * 5 - 1)
    farthest = [c for c in rest if nearest(c) == min(map(nearest, rest))]
    assert fifth is not None and new_pairs(fifth) == max(map(new_pairs, rest)) > max(map(new_pairs, farthest))
    doubted = proposal(4 * 5 - 1, feasibility=lambda p: 0.5 if p == fifth else 1.0)
    assert doubted != fifth, "not where a learned rule doubts it will run"
    assert proposal(4 * 5) == proposal(4 * 5, explore_every=0), "the trial after it is the model's again"
    assert proposal(4 * 5 - 1, budget=24) == proposal(4 * 5 - 1, explore_every=0), "the last quarter refines"


def test_the_sweep_runs_the_models_linear_algebra_on_one_thread(tmp_path: Path, monkeypatch: Any) -> None:
    """Two BLAS threads beside the benchmark client or another sweep only fight them (tuner.study)."""
    seen: list[int] = []
    propose = PairwiseModelSampler.propose

    def spying(self: PairwiseModelSampler, *args: Any) -> Any:
        seen.extend(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")
        return propose(self, *args)

    monkeypatch.setattr(PairwiseModelSampler, "propose", spying)
    space = Path(__file__).resolve().parents[2] / "search_spaces" / "demo-sim.yaml"
    opts = SweepOptions(space_path=str(space), db_path=str(tmp_path / "t.db"), budget=6, seed=0, offline=True)
    with threadpool_limits(limits=2, user_api="blas"):  # what a 2-core machine gives numpy by default
        Sweep(opts, lambda n, b, s: SweepView(Console(file=io.StringIO()), n, b, s)).run()
        after = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert seen and set(seen) == {1}
    assert set(after) == {2}  # given back when the sweep ends


def _pass_study(history: list[tuple[dict[str, Any], float, bool]]) -> optuna.Study:
    """A study of (params, reading, proposed by the one-setting pass) trials, in order."""
    study = optuna.create_study(direction="maximize")
    dists = {p.name: p.distribution() for p in SPACE.params}
    for params, reading, by_pass in history:
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=reading,
                                                  user_attrs={"status": "ok"},
                                                  system_attrs={PASS_MARK: True} if by_pass else {}))
    return study


def test_the_pass_goes_on_from_the_best_it_launched_not_from_a_near_tie_measured_late() -> None:
    """Two in flight: triton (measured last, 1% above auto) wins the runner's turn after EP 2 was
    measured from auto at +50%, and EP 2 with triton reads low. The pass goes on from auto + EP 2,
    the best it launched by then, not from triton + EP 1; a later proposal that was not the pass's
    (the model's, reading higher still) does not move it."""
    def c(runner: str, ep: int, graphs: int = 16, checkpoint: str = "slow") -> dict[str, Any]:
        return {"checkpoint": checkpoint, "moe_runner_backend": runner, "ep_size": ep, "cuda_graph_max_bs": graphs}

    walked = [(c("auto", 1), 10.0, True), (c("auto", 1, checkpoint="fast"), 9.0, True),
              (c("auto", 2), 15.0, True),  # proposed from auto while triton ran
              (c("triton", 1), 10.1, True), (c("marlin", 1), 9.0, True), (c("triton", 2), 9.0, True)]
    sampler = PairwiseModelSampler(SPACE, blocked=lambda p: False, seed=0, start_with_one_pass=True)
    assert sampler.propose(_pass_study(walked).get_trials(), number=len(walked)) == c("auto", 2, 32)

    later = [*walked, (c("marlin", 2, 64, "fast"), 20.0, False)]
    assert sampler.propose(_pass_study(later).get_trials(), number=len(later)) == c("auto", 2, 32)


def _offline_study(tmp_path: Path, space: Path, budget: int, seed: int) -> optuna.Study:
    """Run (or resume) the offline loop with the model sampler over ``space`` to ``budget`` launches,
    in a database under ``tmp_path``; its study."""
    opts = SweepOptions(space_path=str(space), db_path=str(tmp_path / "t.db"), budget=budget, seed=seed,
                        study_name="offline", sampler="model", offline=True)
    Sweep(opts, lambda n, b, s: SweepView(Console(file=io.StringIO()), n, b, s)).run()
    return optuna.load_study(study_name="offline", storage=f"sqlite:///{tmp_path / 't.db'}")


def test_the_one_setting_pass_marks_the_trials_it_proposed(tmp_path: Path) -> None:
    """The offline loop with the model sampler: the pass's proposals carry :data:`PASS_MARK`, the
    model's after it do not (so a resumed sweep tells them apart)."""
    study = _offline_study(tmp_path, FIXTURES / "e2e-space.yaml", budget=14, seed=0)
    proposed = [t for t in study.get_trials() if t.params and not queued(t)]
    marks = [bool(t.system_attrs.get(PASS_MARK)) for t in proposed]
    assert marks[0] and not marks[-1], marks
    assert marks == sorted(marks, reverse=True), f"the pass's proposals come first: {marks}"


def _offline_sweep(tmp_path: Path, budget: int) -> list[tuple[Any, ...]]:
    """Run (or resume) one seeded offline sweep of DeepSeek-V3 to ``budget`` launches; every trial's
    number, configuration and reading."""
    study = _offline_study(tmp_path, DEEPSEEK_V3, budget=budget, seed=4)
    return [(t.number, sorted(t.params.items()), t.value) for t in study.get_trials()]


def test_a_resumed_sweep_proposes_what_the_uninterrupted_one_would(tmp_path: Path) -> None:
    """With one trial in flight, a seeded sweep stopped after the pass and resumed launches the same
    configurations, read alike, as one run straight to the budget: the model's random draws depend on
    the seed and the trial's number, not on how many proposals this process made."""
    straight = _offline_sweep(tmp_path / "straight", 30)
    _offline_sweep(tmp_path / "resumed", 24)
    resumed = _offline_sweep(tmp_path / "resumed", 30)
    assert len(straight) >= 30
    assert resumed == straight
