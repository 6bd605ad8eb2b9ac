"""One setting at a time, from the first values: the search people do by hand, and SGLang's own
auto-benchmark. A baseline for comparisons (``--sampler coordinate``), not the default.

From the configuration with every parameter at its first value, try each value of the first
parameter with the others held; where one fails and its log names another setting, try it with the
other values of that setting too (a repair); keep the best; go on to the next parameter; start over
when all were tried once. Derived from the study's trials each time, so it resumes like any sampler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from optuna.trial import FrozenTrial

from core.errors import ConfigError
from core.slo import Slo
from core.types import FailureKind, RunStatus
from tuner.failure_rules import Learner, Observation, signature
from tuner.space import SearchSpace
from tuner.whole_config import PASS_MARK, WholeConfigSampler, config_key, history, queued

Params = dict[str, Any]
PASSES = 3


class CoordinateSampler(WholeConfigSampler):
    """One-setting-at-a-time search over ``space`` (see module docstring)."""

    def __init__(self, space: SearchSpace, blocked: Callable[[Params], bool], passes: int = PASSES,
                 follow_best: bool = False, skip_foretold: bool = False) -> None:
        """``follow_best``: after each setting, go on from the best configuration the pass launched by
        then (:meth:`_best_by_then`) where it reads higher than that setting's best move: with two
        trials in flight, a move proposed from a near tie that later lost its turn can be the best
        the pass has measured; ``skip_foretold``: leave out a move that would repeat a failure
        (:meth:`_foretelling`). Both for the model sampler's pass; the baseline strategy walks as by hand."""
        self.space = space
        self.follow_best = follow_best
        self.skip_foretold = skip_foretold
        self.blocked = blocked
        self.passes = passes
        self.learner = Learner(space)
        self.slos: tuple[Slo, ...] = ()  # with objectives, a pass that meets none moves towards meeting them

    def propose(self, trials: Sequence[FrozenTrial], number: int) -> Params | None:
        """Walk the passes from the first values; the first variant (or repair) not tried yet."""
        measured, failed, running = history(trials, number)
        tried = {*measured, *map(config_key, failed), *map(config_key, running)}
        reasons = {config_key(t.params): (str(t.user_attrs.get("failure_kind", "")),
                                          str(t.user_attrs.get("failure_reason", "")))
                   for t in trials if t.params and t.user_attrs.get("status") == RunStatus.INFEASIBLE}
        passed = self._first_pass(trials) if self.follow_best else {}
        foretold = self._foretelling(reasons, measured) if self.skip_foretold else []
        current = self.space.from_assignments({}).params
        for _ in range(self.passes):
            for param in self.space.params:
                if param.name not in current:
                    continue
                variants = self._variants(current, param.name)
                shunned = self._shunned(current, param.name, variants, reasons, tried)
                causes = {**shunned, **reasons}  # why each failed (or implicated) variant needs a repair
                variants += [r for v in variants if config_key(v) in causes
                             for r in self._repairs(v, param.name, causes[config_key(v)], reasons, measured)]
                if not self._not_the_cause(current, variants, reasons):
                    for v in variants:
                        key = config_key(v)
                        if key not in tried and key not in shunned and not self.blocked(v) and \
                                not any(_keeps(v, named) for named in foretold):
                            return v
                scored = [(measured[config_key(v)], v) for v in variants if config_key(v) in measured]
                if scored:
                    current = max(scored, key=lambda sv: sv[0])[1]
                    if self.follow_best:
                        current = self._best_by_then(current, variants, measured, passed)
                elif config_key(current) in reasons and (pending := self._in_flight(variants, running)):
                    current = pending  # standing on a failure: go on from the variant that may have fixed it
                elif self.slos:  # none met the objectives yet: the one that came closest
                    current = self._closest(variants, trials) or current
        return None

    def _not_the_cause(self, current: Params, variants: list[Params],
                       reasons: dict[Any, tuple[str, str]]) -> bool:
        """Has this setting been shown not to cause the failure of ``current``, the configuration the
        pass stands on (its first values, while none ran)? So when another value of it failed the same
        way and the log names no setting: changing it did not help, so its other values would most
        likely fail too (the cause is elsewhere), and the pass moves on to the next setting instead of
        paying a launch for each of them."""
        key = config_key(current)
        why = reasons.get(key)
        if why is None or self._named(current, why):
            return False
        own = signature(*why)
        return any(k != key and k in reasons and signature(*reasons[k]) == own
                   for k in map(config_key, variants))

    def _foretelling(self, reasons: dict[Any, tuple[str, str]],
                     measured: dict[Any, float]) -> list[list[tuple[str, Any]]]:
        """For each failure whose log names settings ("mooncake EP needs at least 4 ranks":
        ``moe_a2a_backend=mooncake``) where no measured launch had them all, those settings: a move
        that keeps them would fail alike (the pass walked on, from another runner, and would repeat it)."""
        out = []
        for key, why in reasons.items():
            named = self._named(dict(key), why)
            if named and not any(_keeps(dict(m), named) for m in measured):
                out.append(named)
        return out

    @staticmethod
    def _first_pass(trials: Sequence[FrozenTrial]) -> dict[Any, int]:
        """Key -> trial number of each configuration the pass proposed (:data:`PASS_MARK`) before the
        first proposal that was not the pass's (re-measures, asked for by the study, left out)."""
        out: dict[Any, int] = {}
        for t in sorted(trials, key=lambda t: t.number):
            if not t.params or queued(t):
                continue
            if not t.system_attrs.get(PASS_MARK):
                break
            out.setdefault(config_key(t.params), t.number)
        return out

    @staticmethod
    def _best_by_then(current: Params, variants: list[Params], measured: dict[Any, float],
                      passed: dict[Any, int]) -> Params:
        """The best measured configuration the pass launched (``passed``: key -> first trial number) no
        later than the last of ``variants`` (the moves of the setting just walked), if it reads higher
        than ``current``, else ``current``. Later launches are left out, so the walk does not move with
        the model's proposals after the pass."""
        then = max((passed[k] for k in map(config_key, variants) if k in passed), default=-1)
        known = [k for k in measured if k in passed and passed[k] <= then]
        best = max(known, key=lambda k: measured[k], default=None)
        return dict(best) if best is not None and measured[best] > measured[config_key(current)] else current

    @staticmethod
    def _in_flight(variants: list[Params], running: list[Params]) -> Params | None:
        """The first of ``variants`` still in flight, if any. While the configuration the pass stands on
        fails and none of its variants has run yet, the pass goes on from one in flight, as if it will
        run: moves from a configuration that fails would fail the same way unless they change its
        cause, and with two trials in flight they were launched one after another, each failing alike,
        while the variant that fixed it was still being measured."""
        pending = set(map(config_key, running))
        return next((v for v in variants if config_key(v) in pending), None)

    def _closest(self, variants: list[Params], trials: Sequence[FrozenTrial]) -> Params | None:
        """The variant that missed the objectives by the least (the largest ratio of measured value to
        limit, on the wrong side, over the objectives), among those measured; None if none was."""
        metrics = {config_key(t.params): t.user_attrs["metrics"] for t in trials
                   if t.params and t.user_attrs.get("failure_kind") == FailureKind.SLO_MISSED
                   and isinstance(t.user_attrs.get("metrics"), dict)}

        def miss(v: Params) -> float:
            worst = 1.0
            for slo in self.slos:
                value = slo.value_in(metrics[config_key(v)])
                if value == value and value > 0 and slo.limit > 0:
                    worst = max(worst, value / slo.limit if slo.is_ceiling else slo.limit / value)
            return worst

        missed = [v for v in variants if config_key(v) in metrics]
        return min(missed, key=miss) if missed else None

    def _shunned(self, current: Params, name: str, variants: list[Params], reasons: dict[Any, tuple[str, str]],
                 tried: set[Any]) -> dict[Any, tuple[str, str]]:
        """The variants of ``name`` not tried yet that a sibling's failure implicates, each with that
        failure's (kind, reason): where a variant failed with a log that names no value of ``name`` but
        names a value the pass's configuration has ("cutlass fp8 MoE does not support expert
        parallelism" at EP 2, with the cutlass runner kept), the same move to any other value of
        ``name`` would fail alike while that value is kept. The pass launches their repairs instead."""
        causes: list[tuple[str, str]] = []
        values = self._values(name)
        for v in variants:
            why = reasons.get(config_key(v))
            if why is None or any(self.learner.names_value(name, u, why[1]) for u in values):
                continue
            if any(other != name and current.get(other) == value
                   for other, value in self._named(v, why) if self.learner.names_value(other, value, why[1])):
                causes.append(why)
        if not causes:
            return {}
        return {config_key(v): causes[0] for v in variants if config_key(v) not in tried and v != current}

    def _values(self, name: str) -> list[Any]:
        """Every value of parameter ``name``."""
        param = next(p for p in self.space.params if p.name == name)
        return list(param.values() or [])

    def _repairs(self, failed: Params, name: str, why: tuple[str, str], reasons: dict[Any, tuple[str, str]],
                 measured: dict[Any, float]) -> list[Params]:
        """The failed variant with another value of each other setting its failure's log names:
        "DeepEP requires ep_size == tp_size (8)" after ``moe_a2a_backend=deepep`` failed at ep_size 1
        tries it at the other EP sizes, as one would by hand: first at the values the log names (EP 8),
        and at the others only if none of those ran, so a message that says what it needs costs one
        failed launch, not one per value. For a move that did not fail but that a sibling's failure
        implicates (:meth:`_shunned`: EP 4 with cutlass after "cutlass fp8 MoE does not support expert
        parallelism" at EP 2), one other value at a time, the one that read best so far first, and the
        next only if that one failed too: the pass measures EP 4 once, not once per runner."""
        out: list[Params] = []
        for other, value in self._named(failed, why):
            if other == name:
                continue
            variants = [v for v in self._variants(failed, other) if v.get(other) != value]
            asked = [v for v in variants if self.learner.names_value(other, v.get(other), why[1])]
            if any(config_key(v) in measured for v in asked):
                out.extend(asked)
                continue
            rest = [v for v in variants if v not in asked]
            if config_key(failed) not in reasons:  # a stand-in for a move its sibling's failure implicates
                rest = self._one_at_a_time(rest, other, reasons, measured)
            out.extend(asked + rest)
        return out

    @staticmethod
    def _one_at_a_time(variants: list[Params], name: str, reasons: dict[Any, tuple[str, str]],
                       measured: dict[Any, float]) -> list[Params]:
        """``variants`` (each another value of ``name``) by the best reading of their value so far,
        up to and with the first that has not failed."""
        best: dict[Any, float] = {}
        for key, value in measured.items():
            setting = dict(key).get(name)
            best[setting] = max(best.get(setting, 0.0), value)
        out: list[Params] = []
        for v in sorted(variants, key=lambda v: -best.get(v.get(name), 0.0)):
            out.append(v)
            if config_key(v) not in reasons:
                break
        return out

    def _named(self, failed: Params, why: tuple[str, str]) -> list[tuple[str, Any]]:
        """The settings of ``failed`` that its failure's (kind, reason) names (:meth:`Learner.named_pairs`)."""
        return self.learner.named_pairs(Observation(0, failed, why[0] or "failed", why[1]))

    def _variants(self, current: Params, name: str) -> list[Params]:
        out: list[Params] = []
        for value in self._values(name):
            try:
                out.append(self.space.from_assignments({**current, name: value}).params)
            except ConfigError:  # forbidden: skip
                continue
        return out


def _keeps(params: Params, pairs: list[tuple[str, Any]]) -> bool:
    """Does ``params`` have every setting of ``pairs``?"""
    return all(params.get(name) == value for name, value in pairs)
