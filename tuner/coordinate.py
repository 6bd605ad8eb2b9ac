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
from core.types import FailureKind
from tuner.failure_rules import Learner, Observation, signature
from tuner.space import SearchSpace
from tuner.whole_config import WholeConfigSampler, config_key, history

Params = dict[str, Any]
PASSES = 3


class CoordinateSampler(WholeConfigSampler):
    """One-setting-at-a-time search over ``space`` (see module docstring)."""

    def __init__(self, space: SearchSpace, blocked: Callable[[Params], bool], passes: int = PASSES) -> None:
        self.space = space
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
                   for t in trials if t.params and t.user_attrs.get("status") == "infeasible"}
        current = self.space.from_assignments({}).params
        for _ in range(self.passes):
            for param in self.space.params:
                if param.name not in current:
                    continue
                variants = self._variants(current, param.name)
                variants += [r for v in variants if config_key(v) in reasons
                             for r in self._repairs(v, param.name, reasons[config_key(v)], measured)]
                if not self._not_the_cause(current, variants, reasons):
                    for v in variants:
                        if config_key(v) not in tried and not self.blocked(v):
                            return v
                scored = [(measured[config_key(v)], v) for v in variants if config_key(v) in measured]
                if scored:
                    current = max(scored, key=lambda sv: sv[0])[1]
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

    def _repairs(self, failed: Params, name: str, why: tuple[str, str], measured: dict[Any, float]) -> list[Params]:
        """The failed variant with another value of each other setting its failure's log names:
        "DeepEP requires ep_size == tp_size (8)" after ``moe_a2a_backend=deepep`` failed at ep_size 1
        tries it at the other EP sizes, as one would by hand: first at the values the log names (EP 8),
        and at the others only if none of those ran, so a message that says what it needs costs one
        failed launch, not one per value."""
        out: list[Params] = []
        for other, value in self._named(failed, why):
            if other == name:
                continue
            variants = [v for v in self._variants(failed, other) if v.get(other) != value]
            asked = [v for v in variants if self.learner.names_value(other, v.get(other), why[1])]
            ran = any(config_key(v) in measured for v in asked)
            out.extend(asked if ran else asked + [v for v in variants if v not in asked])
        return out

    def _named(self, failed: Params, why: tuple[str, str]) -> list[tuple[str, Any]]:
        """The settings of ``failed`` that its failure's (kind, reason) names (:meth:`Learner.named_pairs`)."""
        return self.learner.named_pairs(Observation(0, failed, why[0] or "failed", why[1]))

    def _variants(self, current: Params, name: str) -> list[Params]:
        out: list[Params] = []
        param = next(p for p in self.space.params if p.name == name)
        for value in param.values() or []:
            try:
                out.append(self.space.from_assignments({**current, name: value}).params)
            except ConfigError:  # forbidden: skip
                continue
        return out
