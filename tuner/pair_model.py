"""A model of log tok/s in which few pairs of settings interact, and strongly: spike and slab.

Serving landscapes are mostly additive in log tok/s (a MoE runner, a KV-cache dtype, a CUDA-graph
size each scale throughput), with a few pairs that matter a lot together: an all-to-all backend with
one EP size, MTP with two-batch overlap, a step count that pays only with another setting. A dense
pairwise prior (every pair a little) expects no large interaction anywhere, so after the one-setting
pass it never tries a corner it has not measured. Here each pair of settings is either *quiet*
(pairwise effects of about ``SPIKE_SD``) or *loud* (about ``SLAB_SD``), a priori loud with chance
``LOUD_PRIOR``; which pairs are loud is sampled by Gibbs sampling from the launches' marginal
likelihood, and expected improvement is averaged over the sampled structures (a Bayesian model
average; the sparse prior of BOCS, Baptista & Poloczek 2018, as a Gaussian process). A pair the data
show loud is exploited; an untried corner of a pair that may be loud keeps the doubt that gets it
tried; the many quiet pairs do not blur the rest.

A reading far below what the other launches predict of it (left out, :data:`OUTLIER_Z` standard
deviations) is trusted less, as one noisy-neighbour reading at 0.75x would be; a second reading of
the same configuration (the sweep re-measures surprises) or low readings of its neighbours restore it.

Scales are absolute in log tok/s (a loud pair moves throughput by about 20%), not relative to the
spread of the readings, which after a one-setting pass says nothing about the corners not measured.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tuner.encoding import Encoding, Factored, expected_improvement, log_likelihood, log_likelihoods

LEVEL_VAR = 0.05  # prior variance of the overall level (log tok/s, after centring)
SPIKE_SD = 0.02  # a quiet pair's effects (log tok/s)
SLAB_SD = 0.2  # a loud pair's effects: about +-20% of throughput
LOUD_PRIOR = 0.2  # prior chance that a pair of settings is loud
MAIN_VARS = (0.003, 0.01, 0.03)  # per-setting effect variances tried (by marginal likelihood)
NOISE_VARS = (1e-4, 5e-4, 3e-3)  # reading noise variances tried: sd 1%, 2%, 5.5%
OUTLIER_Z = 3.0  # a reading this many standard deviations below what the others predict of it (left out) ...
OUTLIER_VAR = 0.25 ** 2  # ... is trusted less: its noise variance grows by this (a 0.75x noisy neighbour)
GIBBS_SWEEPS = 24  # sweeps over every pair; the structures of the second half are kept ...
GIBBS_FULL_UNTIL = 50  # ... up to this many launches; beyond, fewer (each costs more, and more data decide)
CANDIDATE_BATCH = 2048  # candidates whose expected improvement is worked out at a time
GIBBS_LOOKAHEAD = 8  # pairs whose flips are weighed in one batched factorisation (exact: redone after a flip)
GIBBS_READINGS = 150  # beyond this many launches, the structure is sampled from this many of them, drawn at random
Sample = tuple[tuple[int, ...], float, float]  # loud pairs (indices into the model's pairs), two scales


class _Similarity:
    """Per-parameter similarities of rows ``a`` with rows ``b`` (made when a loud pair needs them), their
    sum, and the sum over pairs of parameters of their products (what the kernel is made of). Summed
    in place: with every configuration of a space as ``a``, a stacked array would not fit in a cache."""

    def __init__(self, enc: Encoding, a: np.ndarray, b: np.ndarray) -> None:
        self.enc, self.a, self.b = enc, a, b
        self._per: dict[int, np.ndarray] = {}
        self._quiet: dict[float, np.ndarray] = {}
        self._loud: dict[tuple[int, int], np.ndarray] = {}
        # Sum over parameters of table[a_i, b_i] (and of its square) as one product: the rows of ``a``
        # one-hot over every parameter's values, times each table's columns at ``b``'s values.
        sizes = [len(t) for t in enc.tables]
        starts = np.cumsum([0, *sizes[:-1]])
        onehot = np.zeros((len(a), sum(sizes)))
        onehot[np.arange(len(a))[:, None], starts[None, :] + a] = 1.0
        columns = np.vstack([t[:, b[:, i]] for i, t in enumerate(enc.tables)]) if len(b) else np.zeros((sum(sizes), 0))
        self.total = onehot @ columns
        squares = onehot @ (columns * columns)
        self.all_pairs = 0.5 * (self.total * self.total - squares)

    def _gather(self, i: int) -> np.ndarray:
        return np.take(self.enc.tables[i][:, self.b[:, i]], self.a[:, i], axis=0)  # rows of the small table

    def per(self, i: int) -> np.ndarray:
        """Similarity of every row of ``a`` with every row of ``b`` in parameter ``i`` alone."""
        if i not in self._per:
            self._per[i] = self._gather(i)
        return self._per[i]

    def covariance(self, main_var: float, loud: list[tuple[int, int]]) -> np.ndarray:
        """The prior covariance with the ``loud`` pairs (of parameter indices) loud, the rest quiet. Its
        terms are kept (per per-setting variance, per loud pair): the posterior samples share them."""
        if main_var not in self._quiet:
            self._quiet[main_var] = LEVEL_VAR + main_var * self.total + SPIKE_SD ** 2 * self.all_pairs
        k = self._quiet[main_var].copy()  # callers add to it in place
        for pair in loud:
            if pair not in self._loud:
                self._loud[pair] = (SLAB_SD ** 2 - SPIKE_SD ** 2) * self.per(pair[0]) * self.per(pair[1])
            k += self._loud[pair]
        return k


class SparsePairModel:
    """The spike-and-slab model fitted to measured rows ``x`` with log tok/s ``y`` (module doc);
    ``rng`` drives the Gibbs sampler, so a seeded sweep proposes the same configurations."""

    def __init__(self, enc: Encoding, x: np.ndarray, y: np.ndarray, rng: np.random.Generator,
                 outlier_z: float = OUTLIER_Z) -> None:
        self.enc, self.x = enc, x
        self.mean = float(np.mean(y))
        self.yc = y - self.mean
        self.pairs = list(itertools.combinations(range(len(enc.tables)), 2))
        self.doubted = np.zeros(len(y))  # extra noise variance of readings that look like low outliers
        sim = _Similarity(enc, x, x)
        subset = np.sort(rng.choice(len(y), GIBBS_READINGS, replace=False)) if len(y) > GIBBS_READINGS else None
        self.samples = self._gibbs(sim, rng, subset)
        low = self._low_outliers(sim, outlier_z)
        if low.any():
            self.doubted = np.where(low, OUTLIER_VAR, 0.0)
            self.samples = self._gibbs(sim, rng, subset)

    def _low_outliers(self, sim: _Similarity, z: float) -> np.ndarray:
        """Readings more than ``z`` standard deviations below what the rest predict of them (leave-one-
        out under the most sampled structure): one low reading should not end a configuration's line."""
        (structure, main_var, noise_var), _ = max(self.samples.items(), key=lambda kv: kv[1])
        k = sim.covariance(main_var, [self.pairs[p] for p in structure]) + noise_var * np.eye(len(self.yc))
        inv = np.linalg.inv(k)
        diag = np.diag(inv)
        return np.asarray((inv @ self.yc) / np.sqrt(diag) < -z)  # residual/sd = (K^-1 y)_i / sqrt(K^-1_ii)

    def _gibbs(self, sim: _Similarity, rng: np.random.Generator, subset: np.ndarray | None) -> dict[Sample, int]:
        """(loud pairs, per-setting variance, noise variance) sampled from their posterior, with the
        times each was sampled: each sweep flips every pair in turn, then redraws the two scales. From
        the readings ``subset`` (indices) only, when given: a large study's structure is plain from a
        sample of its readings, and each step costs the cube of their number."""
        pick = np.arange(len(self.yc)) if subset is None else subset
        yc, within = self.yc[pick], np.ix_(pick, pick)
        eye = np.eye(len(yc))
        doubted = np.diag(self.doubted[pick])
        steps = np.array([(SLAB_SD ** 2 - SPIKE_SD ** 2) * (sim.per(i) * sim.per(j))[within] for i, j in self.pairs])
        scales = [(m, n) for m in MAIN_VARS for n in NOISE_VARS]
        quiet = {m: sim.covariance(m, [])[within] for m in MAIN_VARS}  # every pair quiet, per per-setting variance
        main_var, noise_var = scales[len(scales) // 2]
        loud = np.zeros(len(self.pairs), dtype=bool)
        extra = np.zeros_like(eye)
        prior_logit = math.log(LOUD_PRIOR / (1 - LOUD_PRIOR))
        kept: dict[Sample, int] = {}
        sweeps = max(4, GIBBS_SWEEPS * min(1, GIBBS_FULL_UNTIL / len(yc)))
        for sweep in range(int(sweeps)):
            base = quiet[main_var] + noise_var * eye + doubted
            current = log_likelihood(base + extra, yc)
            order, start = rng.permutation(len(self.pairs)), 0
            while start < len(order):  # the flips ahead, worked out together until one is taken
                ahead = order[start:start + GIBBS_LOOKAHEAD]
                flips = extra[None] + np.where(loud[ahead], -1.0, 1.0)[:, None, None] * steps[ahead]
                others = log_likelihoods(base[None] + flips, yc)
                weighed = len(ahead)  # up to the first flip taken: the rest of ``ahead`` assumed the old state
                for at, p in enumerate(ahead):
                    other = float(others[at])
                    on, off = (current, other) if loud[p] else (other, current)
                    logit = min(max(on - off + prior_logit, -50.0), 50.0)
                    if (rng.random() < 1 / (1 + math.exp(-logit))) != loud[p]:
                        loud[p], extra, current = not loud[p], flips[at], other
                        weighed = at + 1
                        break
                start += weighed
            lls = np.array([log_likelihood(quiet[m] + extra + n * eye + doubted, yc) for m, n in scales])
            odds = np.exp(lls - lls.max())
            main_var, noise_var = scales[int(rng.choice(len(scales), p=odds / odds.sum()))]
            if sweep >= int(sweeps) // 2:
                sample = (tuple(int(i) for i in np.flatnonzero(loud)), main_var, noise_var)
                kept[sample] = kept.get(sample, 0) + 1
        return kept

    def loudness(self) -> dict[tuple[int, int], float]:
        """Each pair of parameter indices with its posterior chance of being loud (only those > 0)."""
        total = sum(self.samples.values())
        out: dict[tuple[int, int], float] = {}
        for (structure, _, _), count in self.samples.items():
            for p in structure:
                out[self.pairs[p]] = out.get(self.pairs[p], 0.0) + count / total
        return out

    def expected_improvement(self, cand: np.ndarray, best: float, in_flight: np.ndarray | None = None) -> np.ndarray:
        """EI over log tok/s ``best`` at candidate rows, averaged over the posterior samples; rows
        ``in_flight`` count as measured at their predicted value (kriging believer). Candidates are
        taken :data:`CANDIDATE_BATCH` at a time, so a whole space's similarities stay in cache."""
        x = self.x if in_flight is None or not len(in_flight) else np.vstack([self.x, in_flight])
        sim, n_params, n = _Similarity(self.enc, x, x), len(self.enc.tables), len(self.yc)
        fits = []
        for (structure, main_var, noise_var), count in self.samples.items():
            loud = [self.pairs[p] for p in structure]
            k = sim.covariance(main_var, loud) + noise_var * np.eye(len(x))
            k[:n, :n] += np.diag(self.doubted)
            yc = self.yc
            if len(x) > n:
                yc = np.concatenate([yc, k[n:, :n] @ np.linalg.solve(k[:n, :n], yc)])
            prior = (LEVEL_VAR + main_var * n_params + SPIKE_SD ** 2 * n_params * (n_params - 1) / 2
                     + (SLAB_SD ** 2 - SPIKE_SD ** 2) * len(loud))
            fits.append((Factored(k, yc), main_var, loud, prior, count))
        out = np.zeros(len(cand))
        for start in range(0, len(cand), CANDIDATE_BATCH):
            cross = _Similarity(self.enc, cand[start:start + CANDIDATE_BATCH], x)
            for fit, main_var, loud, prior, count in fits:
                ks = cross.covariance(main_var, loud)
                sd = np.sqrt(np.maximum(prior - fit.explained(ks), 1e-12))
                out[start:start + len(ks)] += count * expected_improvement(self.mean + ks @ fit.alpha, sd, best)
        return out / sum(count for *_, count in fits)
