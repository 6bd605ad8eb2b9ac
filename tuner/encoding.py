"""Launch configurations as integer rows, their similarity, a GP's likelihood and expected improvement: what the
model-based samplers share (:mod:`tuner.model_sampler`, :mod:`tuner.pair_model`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tuner.space import Param, SearchSpace

ERF_IS_ONE = 6.0  # math.erf(x) is exactly 1.0 from here on (and -1.0 below -6)
ORDINAL_DECAY = 0.5  # similarity of neighbouring values of an ordered parameter
Params = dict[str, Any]


class Encoding:
    """Configurations as integer rows (value index per parameter, 0 = inactive) and their similarity."""

    def __init__(self, space: SearchSpace) -> None:
        self.params: list[Param] = list(space.params)
        self.values: list[list[Any]] = [p.values() or [] for p in self.params]
        self.tables = [self._table(p, vals) for p, vals in zip(self.params, self.values, strict=True)]
        self.column = {p.name: i for i, p in enumerate(self.params)}  # a parameter's column in a row
        self._codes: list[dict[Any, int]] = []  # per column: value -> its code (the first of equal values)
        for vals in self.values:
            codes: dict[Any, int] = {}
            for at, value in enumerate(vals, start=1):
                codes.setdefault(value, at)
            self._codes.append(codes)

    @staticmethod
    def _table(param: Param, values: list[Any]) -> np.ndarray:
        """Similarity of two value indices of one parameter (index 0 = inactive)."""
        n = len(values) + 1
        table = np.eye(n)
        ordered = param.kind != "categorical" or all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if ordered and len(values) > 2:
            for i in range(1, n):
                for j in range(1, n):
                    table[i, j] = ORDINAL_DECAY ** abs(i - j)
        return table

    def encode(self, params: Params) -> np.ndarray:
        """The row of one configuration (values off the grid count as inactive)."""
        return np.array([self.code(i, params[p.name]) if p.name in params else 0
                         for i, p in enumerate(self.params)], dtype=np.int32)

    def code(self, column: int, value: Any) -> int:
        """The integer a row holds in ``column`` for ``value`` (0: off the grid, as if inactive)."""
        return self._codes[column].get(value, 0)

    def settings_apart(self, rows: np.ndarray, row: np.ndarray) -> np.ndarray:
        """For each of ``rows``, how many settings differ from ``row``: a conditional parameter counts
        only where both have it (turning MTP on with its step count is one setting changed, not four)."""
        conditional = np.array([bool(p.conditions) for p in self.params])
        differ = rows != row[None, :]
        both_active = (rows != 0) & (row[None, :] != 0)
        return np.asarray((differ & (~conditional[None, :] | both_active)).sum(axis=1))

    def similarity(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Mean per-parameter similarity of every row of ``a`` with every row of ``b``."""
        out = np.zeros((a.shape[0], b.shape[0]))
        for i, table in enumerate(self.tables):
            out += table[a[:, i][:, None], b[:, i][None, :]]
        return out / max(len(self.tables), 1)


def log_likelihood(k: np.ndarray, yc: np.ndarray) -> float:
    """Log marginal likelihood of ``yc`` under a GP covariance ``k`` (up to a constant); -inf if singular."""
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return -math.inf
    alpha = np.linalg.solve(k, yc)  # one LU: numpy has no triangular solve, two against the factor cost two
    return float(-0.5 * yc @ alpha - np.log(np.diag(chol)).sum())


def log_likelihoods(ks: np.ndarray, yc: np.ndarray) -> np.ndarray:
    """:func:`log_likelihood` of ``yc`` under each covariance of the stack ``ks``, in one batched
    factorisation (equal to one at a time but for the last bits of the sums)."""
    try:
        chol = np.linalg.cholesky(ks)
    except np.linalg.LinAlgError:  # one of them is singular: that one is -inf
        return np.array([log_likelihood(k, yc) for k in ks])
    alpha = np.linalg.solve(ks, np.broadcast_to(yc[:, None], (len(ks), len(yc), 1)))[..., 0]
    return np.asarray(-0.5 * (alpha @ yc) - np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1))


class Factored:
    """A GP covariance ``k`` of the measured rows, factored once, with centred readings ``yc``: the
    weights of the posterior mean (``alpha``) and, for candidates' cross-covariances, the prior variance
    the readings explain. The inverse Cholesky factor makes that one matrix product per candidate
    batch (a triangular solve through ``numpy.linalg.solve`` costs an LU factorisation and twice the
    time). Raises ``numpy.linalg.LinAlgError`` when ``k`` is not positive definite."""

    def __init__(self, k: np.ndarray, yc: np.ndarray) -> None:
        self.inv_chol = np.linalg.inv(np.linalg.cholesky(k))
        self.alpha = self.inv_chol.T @ (self.inv_chol @ yc)

    def explained(self, ks: np.ndarray) -> np.ndarray:
        """``diag(ks K^-1 ks^T)`` for cross-covariances ``ks`` (candidates x measured rows)."""
        w = ks @ self.inv_chol.T
        return np.asarray(np.einsum("ij,ij->i", w, w))


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """The standard normal CDF, elementwise (``math.erf``, which is exactly +-1 beyond +-6: only the
    values between are worked out)."""
    x = np.asarray(z / math.sqrt(2.0), dtype=float)
    erf = np.sign(x)
    between = np.abs(x) < ERF_IS_ONE
    inside = x[between]
    erf[between] = np.fromiter(map(math.erf, inside.tolist()), dtype=float, count=len(inside))
    return np.asarray(0.5 * (1.0 + erf))


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """EI of a maximisation at each candidate."""
    z = (mu - best) / sd
    cdf = normal_cdf(z)
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return np.asarray((mu - best) * cdf + sd * pdf)
