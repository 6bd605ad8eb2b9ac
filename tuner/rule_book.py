"""The failure rules of one running sweep (:mod:`tuner.failure_rules` derives them): which proposals
they stop before launch, and how much the suspected ones doubt the rest, for one configuration or, as
the model sampler asks, for every configuration of a listed space at once (encoded rows)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from core.types import FailureKind
from tuner.encoding import Encoding
from tuner.failure_rules import SUSPECT_ODDS, Learner, Observation, Rule
from tuner.space import SearchSpace


class RuleBook:
    """The rules of one running sweep: derived again from its runs after each launch."""

    def __init__(self, space: SearchSpace) -> None:
        self.learner = Learner(space)
        self.domains = self.learner.domains
        self.rules: list[Rule] = []
        self.epoch = 0  # changes whenever the rules do

    def refresh(self, runs: Iterable[Any]) -> list[Rule]:
        """Derive the rules from the sweep's launched runs (``RunRow``-like); returns the new ones."""
        observations = [Observation(r.trial_number, dict(r.params), None if r.tok_s is not None else r.failure_kind,
                                    r.failure_reason)
                        for r in runs if r.status.launched and (r.tok_s is not None or r.failure_kind)
                        and r.failure_kind != FailureKind.SLO_MISSED]  # a latency, not a failure of settings
        before = {(r.params, r.kind) for r in self.rules}
        rules = self.learner.learn(observations)
        if rules != self.rules:
            self.rules, self.epoch = rules, self.epoch + 1
        return [r for r in self.rules if (r.params, r.kind) not in before and r.confirmed]

    def blocking(self, params: dict[str, Any]) -> Rule | None:
        """The confirmed rule that covers ``params``, if any: such a proposal is not launched."""
        return next((r for r in self.rules if r.confirmed and r.matches(params)), None)

    def blocks(self, params: dict[str, Any]) -> bool:
        """Does a confirmed rule cover ``params``?"""
        return self.blocking(params) is not None

    def feasibility(self, params: dict[str, Any]) -> float:
        """How much the suspected rules doubt ``params`` will run (1.0: not at all); the sampler weighs
        its proposals by this. The suspected rules of one signature from the same failures are
        alternative explanations, one of them the cause: a configuration that matches k of m of them
        fails with chance k/m times the confidence in the failure's cause, 1 - ``SUSPECT_ODDS`` ** (the
        failures that support it). So two crashes at ``ncds=1`` weigh it down more than one, and one
        failure that three different pairs could explain does not weigh a candidate matching two of
        them down as if each were certain."""
        return float(_weight([(n, [np.array(r.matches(params)) for r in group]) for n, group in self._suspects()]))

    def judge(self, enc: Encoding, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each encoded configuration (``enc.encode`` rows): is it covered by a confirmed rule
        (:meth:`blocks`), and its weight (:meth:`feasibility`); the same answers, for a whole space."""
        blocked = np.zeros(len(rows), dtype=bool)
        for rule in self.rules:
            if rule.confirmed:
                blocked |= _matching_rows(rule, enc, rows)
        groups = [(n, [_matching_rows(r, enc, rows) for r in group]) for n, group in self._suspects()]
        return blocked, np.broadcast_to(_weight(groups), (len(rows),)).astype(float)

    def _suspects(self) -> list[tuple[int, list[Rule]]]:
        """The suspected rules grouped by failure signature and supporting trials, with the number of
        failures behind each group."""
        groups: dict[tuple[str, tuple[int, ...]], list[Rule]] = {}
        for rule in self.rules:
            if not rule.confirmed:
                groups.setdefault((rule.signature, rule.trials), []).append(rule)
        return [(len(trials), rules) for (_, trials), rules in groups.items()]

    def records(self) -> list[tuple[str, dict[str, Any]]]:
        """(text, JSON form) of every rule, for the store."""
        return [(r.describe(self.domains), r.as_dict()) for r in self.rules]


def _weight(groups: Sequence[tuple[int, list[np.ndarray]]]) -> np.ndarray:
    """:meth:`RuleBook.feasibility` from each group's failure count and its rules' match masks."""
    weight: np.ndarray = np.array(1.0)
    for failures, matched in groups:
        weight = weight * (1 - np.sum(matched, axis=0) / len(matched) * (1 - SUSPECT_ODDS ** failures))
    return weight


def _matching_rows(rule: Rule, enc: Encoding, rows: np.ndarray) -> np.ndarray:
    """Which encoded rows have every setting of ``rule`` (a rule on a parameter the space lacks: none)."""
    mask = np.ones(len(rows), dtype=bool)
    for name, values in rule.params:
        if name not in enc.column:
            return np.zeros(len(rows), dtype=bool)
        column = enc.column[name]
        mask &= np.isin(rows[:, column], [c for v in values if (c := enc.code(column, v))])
    return mask
