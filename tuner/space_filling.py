"""Space-filling proposals: configurations chosen for what they would teach, not for what they promise.

The model sampler's first proposals (:func:`farthest`) and, with ``--sampler model-explore``, every
fifth after the one-setting pass (:func:`most_new_pairs`) come from here.
"""
from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np

from tuner.encoding import Encoding

PAIR_POOL = 2048  # candidates scored by the pairs of settings they would measure for the first time
Params = dict[str, Any]


def farthest(rng: random.Random, enc: Encoding, cands: list[Params], taken: list[Params]) -> Params:
    """A random candidate far from what was tried (max-min similarity over a random subset of 256)."""
    pool = rng.sample(cands, min(len(cands), 256))
    if not taken:
        return pool[0]
    t = np.array([enc.encode(p) for p in taken])
    s = enc.similarity(np.array([enc.encode(p) for p in pool]), t).max(axis=1)
    return pool[int(np.argmin(s))]


def most_new_pairs(rng: random.Random, enc: Encoding, cands: list[Params], measured: list[Params]) -> Params:
    """A candidate with the most pairs of settings no ``measured`` configuration had together, of a
    random subset of :data:`PAIR_POOL`; among those, the farthest from them (:func:`farthest`)."""
    seen = {pair for p in measured for pair in setting_pairs(p)}
    pool = rng.sample(cands, min(len(cands), PAIR_POOL))
    new = [sum(pair not in seen for pair in setting_pairs(p)) for p in pool]
    most = max(new)
    return farthest(rng, enc, [p for p, n in zip(pool, new, strict=True) if n == most], measured)


def setting_pairs(params: Params) -> list[tuple[tuple[str, Any], tuple[str, Any]]]:
    """Every two settings of ``params`` (in name order)."""
    return list(itertools.combinations(sorted(params.items()), 2))
