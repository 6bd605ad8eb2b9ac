"""The spike-and-slab pairwise model (tuner.pair_model) on a landscape drawn here: it finds which pair
of settings interacts, and its expected improvement leads to the corner that pair pays in."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import numpy as np
import pytest

from tuner.encoding import Encoding, log_likelihood, log_likelihoods, normal_cdf
from tuner.pair_model import SparsePairModel
from tuner.space import SearchSpace
from tuner.space_loader import load_space

NAMES = ["a", "b", "c", "d", "e", "f"]
LOUD = (1, 4)  # b and e: +35% together at their last values, -20% at (first, last)


def space(folder: Path) -> SearchSpace:
    params = "\n".join(f"  {n}: {{choices: [x, y, z]}}" for n in NAMES)
    (folder / "pairs.yaml").write_text(f"name: pairs\nengine: sglang\nbase: {{model_path: /m}}\nparams:\n{params}\n")
    return load_space(folder / "pairs.yaml")


def log_value(row: np.ndarray, mains: np.ndarray) -> float:
    """Small per-setting effects plus one loud pair (rows hold value indices 1..3)."""
    v = float(sum(mains[i, row[i] - 1] for i in range(len(NAMES))))
    b, e = row[LOUD[0]], row[LOUD[1]]
    return v + (0.3 if (b, e) == (3, 3) else -0.22 if (b, e) == (1, 3) else 0.0)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[SparsePairModel, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    mains = rng.normal(0, 0.04, size=(len(NAMES), 3))
    rows = np.array(list(itertools.product((1, 2, 3), repeat=len(NAMES))))
    best = rows[int(np.argmax([log_value(r, mains) for r in rows]))]
    pick = random.Random(3).sample([r for r in rows if not (r == best).all()], 30)
    x = np.array(pick)
    y = np.array([log_value(r, mains) + rng.normal(0, 0.01) for r in x])
    enc = Encoding(space(tmp_path_factory.mktemp("pairs")))
    assert [p.name for p in enc.params] == NAMES
    return SparsePairModel(enc, x, y, np.random.default_rng(0)), rows, mains, x


def test_it_finds_the_pair_that_interacts(fitted: tuple[SparsePairModel, np.ndarray, np.ndarray, np.ndarray]) -> None:
    model = fitted[0]
    loud = model.loudness()
    assert loud.get(LOUD, 0.0) > 0.9
    assert max((p for pair, p in loud.items() if pair != LOUD), default=0.0) < 0.5, loud


def test_its_best_expected_improvement_is_the_corner_that_pays(
        fitted: tuple[SparsePairModel, np.ndarray, np.ndarray, np.ndarray]) -> None:
    model, rows, mains, x = fitted
    measured = {tuple(r) for r in x}
    cand = np.array([r for r in rows if tuple(r) not in measured])
    ei = model.expected_improvement(cand, float(np.max(model.yc + model.mean)))
    top = cand[int(np.argmax(ei))]
    assert (top[LOUD[0]], top[LOUD[1]]) == (3, 3)
    values = sorted((log_value(r, mains) for r in cand), reverse=True)
    assert log_value(top, mains) >= values[int(0.02 * len(values))] - 1e-12, "within the best 2% of 700"
    assert math.isfinite(float(ei.max()))


def test_one_low_reading_among_consistent_ones_is_doubted(
        fitted: tuple[SparsePairModel, np.ndarray, np.ndarray, np.ndarray]) -> None:
    model, _, _, x = fitted
    assert not model.doubted.any(), "readings that agree with the rest are trusted"
    y = model.yc + model.mean
    low = y.copy()
    low[5] += math.log(0.75)  # a noisy neighbour on one launch
    doubted = SparsePairModel(model.enc, x, low, np.random.default_rng(0)).doubted
    assert np.flatnonzero(doubted).tolist() == [5]


def test_batched_likelihoods_and_the_cdf_answer_as_one_at_a_time() -> None:
    rng = np.random.default_rng(7)
    a = rng.normal(size=(6, 9, 9))
    ks = a @ a.transpose(0, 2, 1) + 0.1 * np.eye(9)
    yc = rng.normal(size=9)
    one_at_a_time = [log_likelihood(k, yc) for k in ks]
    assert log_likelihoods(ks, yc) == pytest.approx(one_at_a_time, rel=1e-12)
    ks[2] = np.zeros((9, 9))  # singular: that one is -inf, the others as before
    batched = log_likelihoods(ks, yc)
    assert batched[2] == -math.inf
    assert np.delete(batched, 2) == pytest.approx(np.delete(one_at_a_time, 2), rel=1e-12)
    z = np.concatenate([np.linspace(-12.0, 12.0, 2001), [math.nan]])
    exact = np.array([0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in z])
    assert np.array_equal(normal_cdf(z), exact, equal_nan=True)
