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
from tuner.runs_as import RunsAsBook
from tuner.space import SearchSpace

# A failure explained by contrast with the successes (the fewest settings no success had) is caused by
# those settings alone with this prior chance, else by them with one more setting=value (the rest of the
# prior spread evenly over the other parameters' values; :func:`_cause`). For a rule of two or more
# settings, each of which ran without the others, the cause with one more would be three settings
# together, which SGLang's failures seldom are: CAUSE_ALONE_INTERACTION.
CAUSE_ALONE = 0.5
CAUSE_ALONE_INTERACTION = 0.8


class RuleBook:
    """The rules of one running sweep: derived again from its runs after each launch."""

    def __init__(self, space: SearchSpace) -> None:
        self.learner = Learner(space)
        self.domains = self.learner.domains
        self.rules: list[Rule] = []
        self.failed: dict[int, dict[str, Any]] = {}  # a failed launch's trial number -> its settings
        self.epoch = 0  # changes whenever the rules do
        self.runs_as = RunsAsBook.for_space(space)  # settings SGLang runs otherwise than asked (refreshed by the loop)

    def refresh(self, runs: Iterable[Any]) -> list[Rule]:
        """Derive the rules from the sweep's launched runs (``RunRow``-like), each with its settings as
        the server ran them (:meth:`RunsAsBook.effective_params`; refresh :attr:`runs_as` first);
        returns the new ones."""
        return self.learn([Observation(r.trial_number, self.runs_as.effective_params(dict(r.params), r.flags, r.ran_as),
                                       None if r.tok_s is not None else r.failure_kind, r.failure_reason)
                           for r in runs if r.status.launched and (r.tok_s is not None or r.failure_kind)
                           and r.failure_kind != FailureKind.SLO_MISSED])  # a latency, not a failure of settings

    def relearn(self, runs: Sequence[Any]) -> list[str]:
        """Derive what SGLang runs otherwise (:attr:`runs_as`), then the failure rules, from the sweep's
        runs; the descriptions of the new ones."""
        adjusted = [self.runs_as.describe(r) for r in self.runs_as.refresh(runs)]
        return adjusted + [r.describe(self.domains) for r in self.refresh(runs)]

    def learn(self, observations: Sequence[Observation]) -> list[Rule]:
        """Derive the rules from these launches (all of the sweep's); returns the new confirmed ones."""
        before = {(r.params, r.kind) for r in self.rules}
        rules = self.learner.learn(observations)
        self.failed = {o.trial_number: o.params for o in observations if not o.ok}
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
        fails with chance k/m times each one's :func:`_doubt`. So two crashes at ``ncds=1`` weigh it
        down more than one; one failure that three different pairs could explain does not weigh a
        candidate matching two of them down as if each were certain; and a candidate that changed
        most of the rest of the failing configuration is doubted less than one that kept it."""
        return float(_weight([[self._doubt_of(rule, params) for rule in group] for group in self._suspects()]))

    def _doubt_of(self, rule: Rule, params: dict[str, Any]) -> np.ndarray:
        """:func:`_doubt` of ``rule`` for one configuration."""
        support = [self.failed[t] for t in rule.trials if t in self.failed]
        same = [f for f in support if all(f.get(n) == params.get(n) for n, _ in rule.params)]
        own = {n for n, _ in rule.params}
        others = [{(n, repr(v)) for n, v in f.items() if n not in own} for f in same]
        common = set.intersection(*others) if others else set()
        shared = sum((n, repr(params.get(n))) in common for n in params if n not in own)
        cause = _cause(_alone(rule), self._pair_mass(rule), np.array(shared), np.array(len(common))) \
            if same else np.array(1.0)
        return _doubt(rule, np.array(rule.matches(params)), np.array(len(same) or len(rule.trials)), cause)

    def _pair_mass(self, rule: Rule) -> float:
        """The prior chance that the cause of ``rule``'s failures is its settings with one given other
        setting=value (of a parameter outside the rule), all such pairs alike."""
        own = {n for n, _ in rule.params}
        return (1 - _alone(rule)) / max(1, sum(len(v) for n, v in self.domains.items() if n not in own))

    def judge(self, enc: Encoding, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each encoded configuration (``enc.encode`` rows): is it covered by a confirmed rule
        (:meth:`blocks`), and its weight (:meth:`feasibility`); the same answers, for a whole space."""
        blocked = np.zeros(len(rows), dtype=bool)
        for rule in self.rules:
            if rule.confirmed:
                blocked |= _matching_rows(rule, enc, rows)
        doubts = [[self._row_doubt(rule, enc, rows) for rule in group] for group in self._suspects()]
        return blocked, np.broadcast_to(_weight(doubts), (len(rows),)).astype(float)

    def _row_doubt(self, rule: Rule, enc: Encoding, rows: np.ndarray) -> np.ndarray:
        """:func:`_doubt` of ``rule`` for each encoded row."""
        matched = _matching_rows(rule, enc, rows)
        failures = np.zeros(len(rows))
        own = [enc.column[n] for n, _ in rule.params if n in enc.column]
        holding: dict[tuple[int, int], np.ndarray] = {}  # another setting -> the failures at a row's values with it
        for trial in rule.trials:
            if trial not in self.failed:
                continue
            failed = enc.encode(self.failed[trial])
            same = np.all(rows[:, own] == failed[own], axis=1)
            failures += same
            for column in (enc.column[n] for n in self.failed[trial] if n in enc.column and enc.column[n] not in own):
                key = (column, int(failed[column]))
                holding[key] = holding.get(key, np.zeros(len(rows))) + same
        common, shared = np.zeros(len(rows)), np.zeros(len(rows))
        for (column, code), count in holding.items():
            in_all = (count == failures) & (failures > 0)  # every failure at the row's values had it
            common += in_all
            shared += in_all & (rows[:, column] == code)
        alone = failures == 0
        cause = np.where(alone, 1.0, _cause(_alone(rule), self._pair_mass(rule), shared, common))
        return _doubt(rule, matched, np.where(alone, len(rule.trials), failures), cause)

    def _suspects(self) -> list[list[Rule]]:
        """The suspected rules grouped by failure signature and supporting trials: alternative
        explanations of the same failures."""
        groups: dict[tuple[str, tuple[int, ...]], list[Rule]] = {}
        for rule in self.rules:
            if not rule.confirmed:
                groups.setdefault((rule.signature, rule.trials), []).append(rule)
        return list(groups.values())

    def records(self) -> list[tuple[str, dict[str, Any]]]:
        """(text, JSON form) of every rule, for the store."""
        return [(r.describe(self.domains), r.as_dict()) for r in self.rules] + self.runs_as.records()


def _doubt(rule: Rule, matched: np.ndarray, failures: np.ndarray, cause: np.ndarray) -> np.ndarray:
    """The chance that a candidate fails as ``rule``'s failures did, where it ``matched`` the rule: the
    confidence in the cause, 1 - ``SUSPECT_ODDS`` ** (the failures at the candidate's values of the
    rule's settings), times, for a rule found by contrast, the chance (:func:`_cause`) that the cause
    is in the candidate: a crash at FP8 KV on flashinfer doubts FP8 KV on fa3 less than on flashinfer."""
    return np.asarray(matched * (1 - SUSPECT_ODDS ** failures) * (1.0 if rule.named else cause))


def _alone(rule: Rule) -> float:
    """The prior chance that ``rule``'s settings alone cause its failures (:data:`CAUSE_ALONE`)."""
    return CAUSE_ALONE if len(rule.params) == 1 else CAUSE_ALONE_INTERACTION


def _cause(alone: float, pair_mass: float, shared: np.ndarray, common: np.ndarray) -> np.ndarray:
    """The chance that a candidate holds the cause of a rule's failures: the rule's settings alone
    (prior ``alone``) or with one more setting=value (prior ``pair_mass`` each). Only the
    ``common`` settings every failure had remain possible, so each failure in another context makes
    "alone" likelier (two crashes at ``cuda_graph_max_bs=32`` around two leaders); the candidate holds
    ``shared`` of them."""
    return np.asarray((alone + pair_mass * shared) / (alone + pair_mass * common))


def _weight(groups: Sequence[list[np.ndarray]]) -> np.ndarray:
    """:meth:`RuleBook.feasibility` from each group's per-rule doubts."""
    weight: np.ndarray = np.array(1.0)
    for doubts in groups:
        weight = weight * (1 - np.sum(doubts, axis=0) / len(doubts))
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
