"""A model-based sampler for launch configurations: expected improvement, under a model of log tok/s
with pairwise interactions, over every configuration of the space.

Why not TPE: TPE models each setting apart (or jointly, but only over the settings every trial
shares), so a gain that needs two settings together, or a setting that is good alone and bad with
another, is found late or not at all. Here log tok/s = sum of per-setting effects + sum of pairwise
effects + noise. By default (:mod:`tuner.pair_model`) few pairs are *loud* and the rest quiet, which
pairs sampled from the launches (spike and slab); ``dense=True`` is the earlier model, a GP whose
kernel ``a*s + b*s^2`` of the settings' similarity ``s`` (the share of parameters set alike;
ordered values partly alike by their distance) spreads a little interaction over every pair, its
hyperparameters fitted by marginal likelihood on a small grid after every result. The dense GP also
predicts the chance to run (:meth:`PairwiseModelSampler._feasibility`), service-level metrics and
surprises.

Each proposal is the configuration with the highest expected improvement among the candidates (the
whole space when it can be listed, else a random pool plus every one- and two-setting move from the
best configurations), skipping configurations already measured, in flight (told to the model as
their predicted value, so parallel proposals differ), forbidden, or covered by a confirmed failure
rule; a candidate close to known failures, or covered by a suspected rule, is weighed down. With a
trust region, only candidates at most two settings away from the best configuration measured so far
are considered while there are any.
A failed launch whose log states the values a setting needs is first launched at each of them
(:meth:`PairwiseModelSampler._stated_repair`), as one would after reading the line.
The first proposals are a spread-out random design (with ``model-explore``, every fifth one after
the one-setting pass, until the budget's last quarter, goes where the most pairs of settings would be
measured together for the first time, :data:`EXPLORE_EVERY`: corners the model is sure about without
having seen them). A reading far below what the model expects of a configuration it expects
to be near the best is a *surprise* (:meth:`PairwiseModelSampler.surprise`): the sweep measures it
once more rather than let one noisy reading end that line.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from optuna.samplers import RandomSampler
from optuna.trial import FrozenTrial, TrialState

from core.errors import ConfigError
from core.slo import Slo
from core.types import FailureKind, RunStatus
from tuner.encoding import Encoding, Factored, expected_improvement, log_likelihood, normal_cdf
from tuner.failure_rules import Learner, Observation
from tuner.pair_model import SparsePairModel
from tuner.space import SearchSpace
from tuner.space_filling import farthest, most_new_pairs
from tuner.whole_config import PASS_MARK, WholeConfigSampler, config_key, history

SURPRISE_SIGMAS = 2.0  # a reading this many standard deviations below the model's expectation ...
SURPRISE_NEAR_BEST = 0.97  # ... of a configuration expected within 3% of the best is measured again
FEASIBILITY_NOISE = 0.1  # probit link of the feasibility GP
FEASIBILITY_BATCH = 512  # candidates whose chance to run is worked out at a time, best first
POOL = 4000
INIT_DESIGN = 6
# Share of the prior variance on the per-setting (vs pairwise) term. Fixed, not fitted: the launches of
# the one-setting pass vary one setting at a time, so the likelihood cannot see interactions and chose
# 0.75, which left a pair that helps only together (MTP without two-batch overlap) without the doubt
# that makes expected improvement try it (docs/performance.md: 12/20 vs 9/20 seeds on DeepSeek-V3).
LENGTHS = (0.25,)
NOISES = (1e-3, 1e-2, 5e-2)  # noise variance, as a share of the prior variance
# With a trust region (``--sampler model-local``), proposals after the one-setting pass change at most
# this many settings of the best configuration measured so far (as in TuRBO or CASMOPOLITAN): enough
# for a pair that pays only together. Not the default: it wins on DeepSeek-V3 (16/20 seeds >= 97% vs
# 12/20) and loses on held-out random landscapes whose best is three settings from a local optimum
# (docs/performance.md).
TRUST_RADIUS = 2
# With ``--sampler model-explore``, every this many trials after the one-setting pass the proposal is
# space-filling instead (among those no learned rule doubts, the configuration with the most pairs of
# settings no measured launch had together), as SMAC interleaves random configurations with its
# model's: a pair that pays only together, each half measured bad on its own early on, has an expected
# improvement too small to be tried, and such proposals measure untried pairs systematically.
# Not in the last quarter of the budget, which refines the best (docs/performance.md: held-out random
# landscape 1013 0/10 -> 7/10 seeds at >= 97%; exploring to the end cost Llama-70B 8/10 -> 5/10).
# Not the default: Llama-70B with two in flight fell to 4-6/10 (the default: 8/10).
EXPLORE_EVERY = 5
EXPLORE_SHARE = 0.75
Params = dict[str, Any]
Flags = tuple[np.ndarray, np.ndarray]  # per candidate: covered by a confirmed rule; weight by the suspected ones
Judge = Callable[[Encoding, np.ndarray], Flags]


def _kernel(s: np.ndarray, share: float) -> np.ndarray:
    return np.asarray(share * s + (1.0 - share) * s * s)


class Posterior:
    """A GP fitted to centred log tok/s (hyperparameters by marginal likelihood on a small grid)."""

    def __init__(self, enc: Encoding, x: np.ndarray, y: np.ndarray) -> None:
        self.enc, self.x = enc, x
        self.mean = float(np.mean(y))
        yc = y - self.mean
        self.var = max(float(np.var(yc)), 1e-3)
        s = enc.similarity(x, x)
        best: tuple[float, float, float] | None = None
        for share in LENGTHS:
            for noise in NOISES:
                ll = self._log_likelihood(s, yc, share, noise)
                if best is None or ll > best[0]:
                    best = (ll, share, noise)
        assert best is not None
        _, self.share, noise = best
        self.noise_var = noise * self.var
        self.fit = Factored(self.var * _kernel(s, self.share) + self.noise_var * np.eye(len(y)), yc)

    def _log_likelihood(self, s: np.ndarray, yc: np.ndarray, share: float, noise: float) -> float:
        return log_likelihood(self.var * _kernel(s, share) + noise * self.var * np.eye(len(yc)), yc)

    def predict(self, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean (log tok/s) and standard deviation at candidate rows."""
        ks = self.var * _kernel(self.enc.similarity(cand, self.x), self.share)
        mu = self.mean + ks @ self.fit.alpha
        sd = np.sqrt(np.maximum(self.var - self.fit.explained(ks), 1e-12))
        return mu, sd


class PairwiseModelSampler(WholeConfigSampler):
    """Proposes whole configurations of ``space`` (see module docstring)."""

    def __init__(self, space: SearchSpace, blocked: Callable[[Params], bool],
                 feasibility: Callable[[Params], float] | None = None, seed: int | None = None,
                 init_design: int = INIT_DESIGN, epoch: Callable[[], int] | None = None,
                 start_with_one_pass: bool = False, trust_region: bool = False, dense: bool = False,
                 explore_every: int = 0, judge: Judge | None = None) -> None:
        """``blocked`` (never propose) and ``feasibility`` (a weight in 0..1 on a proposal) answer for
        whole configurations and may change only when ``epoch()`` does (results are cached per epoch);
        ``trust_region``: propose within ``TRUST_RADIUS`` settings of the best measured; ``dense``: the
        dense pairwise GP instead of the spike-and-slab model; ``explore_every``: every this many trials
        after the one-setting pass, a space-filling proposal (0: never; ``--sampler model-explore``:
        :data:`EXPLORE_EVERY`); ``judge``: ``blocked`` and ``feasibility`` of many encoded rows at once
        (:meth:`tuner.rule_book.RuleBook.judge`), for a listed space whose configurations no forbid
        rule covers."""
        self.space = space
        self.explore_every = explore_every
        # the sweep's budget (set by tuner.sampler.make_sampler): no space-filling proposal in its last
        # quarter; None (unknown): they never stop
        self.budget: int | None = None
        # the first trial proposed after the one-setting pass (in this process: a resumed sweep counts
        # from its first proposal); space-filling proposals are paced from it
        self._model_from: int | None = None
        self.trust_region = trust_region
        self.dense = dense
        self.blocked = blocked
        self.feasibility = feasibility or (lambda _: 1.0)
        self.judge = judge
        self.seed = seed
        self.rng = random.Random(seed)  # drawn afresh for each proposal (:meth:`propose`)
        self.init_design = init_design
        self.enc = Encoding(space)
        self.learner = Learner(space)
        self._fallback = RandomSampler(seed=seed)
        self.epoch = epoch or (lambda: 0)
        self.start = None
        if start_with_one_pass:
            from tuner.coordinate import CoordinateSampler

            self.start = CoordinateSampler(space, blocked, passes=1, follow_best=True, skip_foretold=True)
        self._slos: tuple[Slo, ...] = ()
        self._slo_readings: list[tuple[np.ndarray, dict[str, Any]]] = []
        self._slo_missed: set[Any] = set()
        self._listed: list[Params] | None = None
        self._listed_flags: Flags | None = None
        self._listed_epoch = -1
        self._listed_index: dict[Any, int] = {}  # a listed configuration's key -> its index
        listing = space.listing()  # the whole space up to LISTING_KEPT configurations; else a random pool
        if listing is not None:
            self._listed = [dict(p) for p in listing]  # its own: proposals are handed out as they are
            self._listed_rows = np.array([self.enc.encode(p) for p in self._listed])
            self._listed_keys = [config_key(p) for p in self._listed]
            self._listed_index = {key: i for i, key in enumerate(self._listed_keys)}

    @property
    def slos(self) -> tuple[Slo, ...]:
        """Objectives a configuration must meet (set by :func:`tuner.sampler.make_sampler`); the
        one-setting pass and the model both steer towards meeting them."""
        return self._slos

    @slos.setter
    def slos(self, value: tuple[Slo, ...]) -> None:
        self._slos = value
        if self.start is not None:
            self.start.slos = value

    # ---- surprises ----------------------------------------------------------------------------
    def surprise(self, trials: Sequence[FrozenTrial], number: int) -> float | None:
        """The tok/s the model expected of trial ``number`` when its one reading is far below it and the
        expectation is near the best so far (worth measuring again), else None."""
        trial = next((t for t in trials if t.number == number), None)
        if trial is None or not trial.params or trial.value is None or trial.value <= 0:
            return None
        key = config_key(trial.params)
        readings = [t for t in trials if t.params and config_key(t.params) == key and t.value
                    and t.user_attrs.get("status") == RunStatus.OK]
        measured, _, _ = history(trials, number)
        measured.pop(key, None)
        if len(readings) != 1 or len(measured) < self.init_design:
            return None
        keys = list(measured)
        post = Posterior(self.enc, np.array([self.enc.encode(dict(k)) for k in keys]),
                         np.array([math.log(measured[k]) for k in keys]))
        mu, sd = post.predict(self.enc.encode(trial.params)[None, :])
        spread = math.sqrt(float(sd[0]) ** 2 + post.noise_var)
        expected = math.exp(float(mu[0]))
        if expected >= SURPRISE_NEAR_BEST * max(measured.values()) and \
                math.log(trial.value) < float(mu[0]) - SURPRISE_SIGMAS * spread:
            return expected
        return None

    # ---- the proposal --------------------------------------------------------------------------
    def propose(self, trials: Sequence[FrozenTrial], number: int) -> Params | None:
        """The configuration with the best expected improvement, given the study's trials. With a
        seed, its random draws depend only on the seed and ``number``: a resumed sweep proposes what
        the uninterrupted one would have, given the same trials."""
        if self.seed is not None:
            self.rng = random.Random(f"{self.seed}:{number}")
        measured, failed, running = history(trials, number)
        self._note_slo_readings(trials)
        seen = {*measured, *map(config_key, failed), *map(config_key, running)}
        params, rows, keys, (blocked, weight) = self._candidates(measured)
        keep = self._unseen(blocked, keys, seen)
        if not keep:
            return None
        if self.start is not None:  # one setting at a time from the first values, then the model
            first = self.start.propose(trials, number)
            if first is not None:
                self._mark = PASS_MARK
                return first
            if self._model_from is None:
                self._model_from = number
        if len(measured) < self.init_design or len({round(v, 9) for v in measured.values()}) < 2:
            return farthest(self.rng, self.enc, [params[i] for i in keep], [*map(dict, measured), *failed, *running])
        repair = self._stated_repair(trials, seen)
        if repair is not None:
            return repair
        if self._explores(number):
            undoubted = [i for i in keep if weight[i] >= 1.0]
            return most_new_pairs(self.rng, self.enc, [params[i] for i in undoubted or keep],
                                  [*map(dict, measured), *running])
        if self.trust_region:
            keep = self._near_the_best(keep, rows, measured)
        return params[keep[self._best_ei(rows[keep], weight[keep], measured, failed, running)]]

    def _explores(self, number: int) -> bool:
        """Is trial ``number``'s proposal a space-filling one (:data:`EXPLORE_EVERY`)?"""
        every, since = self.explore_every, number - (self._model_from or 0)
        return bool(every) and since % every == every - 1 and \
            (self.budget is None or number < self.budget * EXPLORE_SHARE)

    def _stated_repair(self, trials: Sequence[FrozenTrial], seen: set[Any]) -> Params | None:
        """The latest failed launch whose log states the values a setting needs ("FlashAttention v3
        backend supports kv_cache_dtype fp8_e4m3 or auto, got fp8_e5m2"), with one of them instead, as
        one would after reading the line: each such repair once, whatever the model thinks of it, so
        a value that crashed in another context (fp8_e4m3 with flashinfer) is tried where the line
        vouches for it."""
        for t in sorted(trials, key=lambda t: -t.number):
            if not t.params or t.user_attrs.get("status") != RunStatus.INFEASIBLE:
                continue
            reason = str(t.user_attrs.get("failure_reason", ""))
            failure = Observation(t.number, dict(t.params), str(t.user_attrs.get("failure_kind") or "failed"), reason)
            for name, value in self.learner.named_pairs(failure):
                for stated in sorted(self.learner.stated_values(name, value, reason) or (), key=repr):
                    repair = self._with(t.params, name, stated)
                    if repair is not None and config_key(repair) not in seen and not self.blocked(repair):
                        return repair
        return None

    def _with(self, params: Params, name: str, value: Any) -> Params | None:
        """``params`` with ``name=value`` (conditional settings as the space resolves them); None if forbidden."""
        try:
            return self.space.from_assignments({**params, name: value}).params
        except ConfigError:
            return None

    def _near_the_best(self, keep: list[int], rows: np.ndarray, measured: dict[Any, float]) -> list[int]:
        """The candidates (indices into ``rows``) at most ``TRUST_RADIUS`` settings away from the best
        configuration measured so far; all of ``keep`` when none is left there."""
        best = self.enc.encode(dict(max(measured, key=lambda k: measured[k])))
        near = self.enc.settings_apart(rows[keep], best) <= TRUST_RADIUS
        return [i for i, ok in zip(keep, near, strict=True) if ok] or keep

    def _note_slo_readings(self, trials: Sequence[FrozenTrial]) -> None:
        """The metrics of every measured run (met or missed an objective), and which configurations
        missed one (they ran: not failures for the feasibility model)."""
        self._slo_readings, self._slo_missed = [], set()
        if not self.slos:
            return
        for t in trials:
            metrics = t.user_attrs.get("metrics")
            if t.params and isinstance(metrics, dict) and t.state == TrialState.COMPLETE:
                self._slo_readings.append((self.enc.encode(t.params), metrics))
                if t.user_attrs.get("failure_kind") == FailureKind.SLO_MISSED:
                    self._slo_missed.add(config_key(t.params))

    def _best_ei(self, cand: np.ndarray, doubt: np.ndarray, measured: dict[Any, float], failed: list[Params],
                 running: list[Params]) -> int:
        """Index (in ``cand``) of the candidate with the best discounted expected improvement."""
        keys = list(measured)
        x = np.array([self.enc.encode(dict(k)) for k in keys])
        y = np.array([math.log(measured[k]) for k in keys])
        xr = np.array([self.enc.encode(p) for p in running]) if running else None
        score = self._dense_ei(cand, x, y, xr) if self.dense else SparsePairModel(
            self.enc, x, y, np.random.default_rng(self.rng.randrange(2 ** 32))).expected_improvement(
            cand, float(y.max()), xr)
        score *= self._meets_slos(cand)
        score *= doubt
        score = self._discount_by_failures(score, cand, x, [p for p in failed if config_key(p) not in self._slo_missed])
        top = np.flatnonzero(score >= score.max() * (1 - 1e-9))
        return int(top[self.rng.randrange(len(top))])

    def _discount_by_failures(self, score: np.ndarray, cand: np.ndarray, ok: np.ndarray,
                              failed: list[Params]) -> np.ndarray:
        """``score`` times each candidate's chance to run (:meth:`_feasibility`), worked out best score
        first and only while a candidate's undiscounted score could still reach the best discounted one
        (a chance is at most 1); the rest are left at 0. The best candidates, ties included, are those of
        the full product, at a fraction of the cost on a large space."""
        if not failed:
            return score
        chance = self._feasibility(ok, failed)
        order = np.argsort(-score, kind="stable")
        out = np.zeros_like(score)
        best = 0.0
        for start in range(0, len(order), FEASIBILITY_BATCH):
            if score[order[start]] < best * (1 - 1e-9):
                break
            batch = order[start:start + FEASIBILITY_BATCH]
            out[batch] = score[batch] * chance(cand[batch])
            best = max(best, float(out[batch].max()))
        return out

    def _dense_ei(self, cand: np.ndarray, x: np.ndarray, y: np.ndarray, xr: np.ndarray | None) -> np.ndarray:
        """Expected improvement under the dense pairwise GP; in-flight rows ``xr`` count as their
        predicted value (kriging believer)."""
        post = Posterior(self.enc, x, y)
        if xr is not None:
            post = Posterior(self.enc, np.vstack([x, xr]), np.concatenate([y, post.predict(xr)[0]]))
        mu, sd = post.predict(cand)
        return expected_improvement(mu, sd, float(y.max()))

    def _meets_slos(self, cand: np.ndarray) -> np.ndarray:
        """Chance that a candidate meets every service-level objective: per objective, a GP on the log of
        the metric as every measured run read it (those that missed an objective included), and the
        probability that the candidate's lies on the right side of the limit (constrained EI)."""
        chance = np.ones(len(cand))
        readings = self._slo_readings
        for slo in self.slos:
            pairs = [(row, v) for row, metrics in readings if (v := slo.value_in(metrics)) == v and v > 0]
            if len(pairs) < 2 or slo.limit <= 0:
                continue
            x = np.array([row for row, _ in pairs])
            mu, sd = Posterior(self.enc, x, np.log([v for _, v in pairs])).predict(cand)
            z = (math.log(slo.limit) - mu) / np.maximum(sd, 1e-6)
            chance *= normal_cdf(z if slo.is_ceiling else -z)
        return chance

    def _feasibility(self, ok: np.ndarray, failed: list[Params]) -> Callable[[np.ndarray], np.ndarray]:
        """Chance that a candidate (row) runs: a GP on the launches' outcomes (+1 ran, -1 failed) with the
        same pairwise kernel, so a failure that needs two settings together lowers the chance of exactly
        the candidates that share both."""
        bad = np.array([self.enc.encode(p) for p in failed])
        labels = np.concatenate([np.ones(len(ok)), -np.ones(len(bad))])
        post = Posterior(self.enc, np.vstack([ok, bad]), labels)

        def chance(rows: np.ndarray) -> np.ndarray:
            mu, sd = post.predict(rows)
            return normal_cdf(mu / np.sqrt(sd * sd + FEASIBILITY_NOISE))

        return chance

    def _candidates(self, measured: dict[Any, float]) -> tuple[list[Params], np.ndarray, list[Any], Flags]:
        """Candidate configurations, their rows and keys, and (blocked, weight by the suspected rules)
        for each; the listed space's flags are cached until the rules change."""
        if self._listed is not None:
            epoch = self.epoch()
            if self._listed_flags is None or self._listed_epoch != epoch:
                self._listed_flags = self.judge(self.enc, self._listed_rows) if self.judge else \
                    self._flags(self._listed)
                self._listed_epoch = epoch
            return self._listed, self._listed_rows, self._listed_keys, self._listed_flags
        pool = [self._random_config() for _ in range(POOL)]
        for key in sorted(measured, key=lambda k: -measured[k])[:3]:
            pool.extend(self.space.moves(dict(key)))
        pool = [p for p in pool if not self.space.violates(p)]
        rows = np.array([self.enc.encode(p) for p in pool]).reshape(len(pool), len(self.enc.params))
        return pool, rows, [config_key(p) for p in pool], self._flags(pool)

    def _unseen(self, blocked: np.ndarray, keys: list[Any], seen: set[Any]) -> list[int]:
        """Indices of the candidates (keys ``keys``) neither blocked nor ``seen``, in order; a listed
        space's seen ones are found by their index, not by hashing every candidate's key."""
        free = ~blocked
        if self._listed is None:
            return [i for i in np.flatnonzero(free).tolist() if keys[i] not in seen]
        free[[self._listed_index[k] for k in seen if k in self._listed_index]] = False
        return list(np.flatnonzero(free).tolist())

    def _flags(self, configs: list[Params]) -> Flags:
        """(blocked, weight) of each configuration, one at a time."""
        return (np.array([self.blocked(p) for p in configs], dtype=bool),
                np.array([self.feasibility(p) for p in configs], dtype=float))

    def _random_config(self) -> Params:
        return self.space.build(lambda p, _: self.rng.choice(p.values() or [p.low, p.high])).params
