"""Settings SGLang runs otherwise than asked, learned from the sweep's own launches.

SGLang adjusts some settings while it resolves its arguments and says so in one log line at most:
any all-to-all backend sets the expert-parallel size to the tensor-parallel size ("deepep MoE is
enabled. The expert parallel size is adjusted from 1 to the tensor parallel size [8]."), ``fa3`` with
an ``fp8_e5m2`` KV cache runs triton, topk 1 sets the draft tokens to steps + 1. Two configurations
that differ only there are one server, and the second launch of it pays again for a measurement the
sweep has. Each launch records what its server reports otherwise than asked (``/server_info``:
:attr:`core.types.TrialResult.ran_as`); from those, a :class:`RunsAs` rule says which settings make
SGLang run a setting as a value, and a proposal those rules turn into a configuration already
measured is answered from that measurement, not launched.

A rule's condition is worked out by contrast, as failures are (:mod:`tuner.failure_rules`): a set of
one or two setting=value pairs that adjusted launches had and no launch that ran the setting as asked
(at another value) had. The condition that covers the most adjusted launches is taken first, joined
with the other smallest ones that cover the same launches, so one launch alone says no more than all
it had that the as-asked ones did not, and a pair only one launch had does not stand for what several
share; the asked value stays in the condition until two asked values ran alike (what a setting runs
as may depend on it: DP attention divides the chunked prefill size). Derived again from all launches
after each one, so a resumed sweep derives the same rules and a launch that contradicts one ends it.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.flags import same_value
from core.types import Config, RunStatus
from tuner.space import SearchSpace

Pair = tuple[str, str]  # (dest, repr of the value): hashable whatever the value's type
MAX_CONDITION = 2
SHOWN_TRIALS = 4  # a rule's supporting trials named in its description, then a count


def _pair(dest: str, value: Any) -> Pair:
    return dest, repr(value)


def _pairs(flags: dict[str, Any]) -> frozenset[Pair]:
    return frozenset(_pair(k, v) for k, v in flags.items())


@dataclass(frozen=True)
class RunsAs:
    """SGLang runs ``dest`` as ``value`` whenever a launch's flags hold every pair of ``condition``
    (dest -> value asked), as launches ``trials`` showed."""

    dest: str
    value: Any
    condition: tuple[tuple[str, Any], ...]
    trials: tuple[int, ...]

    def covers(self, flags: dict[str, Any]) -> bool:
        """Do these flags hold the condition and ask ``dest`` otherwise than it runs?"""
        if self.dest in flags and same_value(flags[self.dest], self.value):
            return False
        return all(dest in flags and _pair(dest, flags[dest]) == _pair(dest, v) for dest, v in self.condition)

    def describe(self, fixed: Collection[str] = ()) -> str:
        """E.g. "ep_size runs as 8 with moe_a2a_backend=deepep, from trial 3 (the server's /server_info)";
        the settings in ``fixed`` (every configuration of the sweep has them alike) are left out."""
        cond = ", ".join(f"{k}={v}" for k, v in self.condition if k not in fixed) or "the base settings"
        shown = ", ".join(map(str, self.trials[:SHOWN_TRIALS]))
        more = f" and {len(self.trials) - SHOWN_TRIALS} more" if len(self.trials) > SHOWN_TRIALS else ""
        return f"{self.dest} runs as {self.value} with {cond}, from trial{'s' * (len(self.trials) > 1)} " \
               f"{shown}{more} (the server's /server_info)"

    def as_dict(self) -> dict[str, Any]:
        """JSON form, for the store."""
        return {"runs_as": {"dest": self.dest, "value": self.value, "condition": dict(self.condition),
                            "trials": list(self.trials)}}


def learn(runs: Iterable[Any]) -> list[RunsAs]:
    """The rules the measured runs (``RunRow``-like: ``flags``, ``ran_as``, ``status``) support."""
    measured = _measured(runs)
    seen: dict[Pair, tuple[str, Any]] = {}
    for r in measured:
        for dest, value in (r.ran_as or {}).items():
            seen.setdefault(_pair(dest, value), (dest, value))
    rules: list[RunsAs] = []
    for dest, value in seen.values():
        adjusted = [r for r in measured if _pair(dest, (r.ran_as or {}).get(dest)) == _pair(dest, value)]
        as_asked = [_pairs(r.flags) for r in measured if dest in r.flags and dest not in (r.ran_as or {})
                    and _pair(dest, r.flags[dest]) != _pair(dest, value)]
        rules += _cover(dest, value, adjusted, as_asked)
    return rules


def _cover(dest: str, value: Any, adjusted: Sequence[Any], as_asked: Sequence[frozenset[Pair]]) -> list[RunsAs]:
    """Rules that explain the ``adjusted`` runs, greedily: the runs that one condition (one or two
    pairs) no as-asked run has covers, the most of them first; the smallest such conditions that
    cover just those runs are joined, so one run alone says no more than all it had that the
    as-asked runs did not, and a pair that only one run had does not stand for a condition several share."""
    left, out = list(adjusted), []
    while left:
        fits = _fits(left, as_asked)
        if not fits:
            break
        covered = max(fits, key=lambda c: (len(c), -min(len(f) for f in fits[c]), -min(c)))
        smallest = min(len(f) for f in fits[covered])
        group = [left[i] for i in sorted(covered)]
        condition = frozenset().union(*(f for f in fits[covered] if len(f) == smallest))
        asked = {_pair(dest, r.flags.get(dest)) for r in group}
        if len(asked) == 1 and dest in group[0].flags:  # what it runs as may depend on what was asked
            condition |= asked
        out.append(_rule(dest, value, group, condition))
        left = [r for i, r in enumerate(left) if i not in covered]
    return out


def _fits(left: Sequence[Any], as_asked: Sequence[frozenset[Pair]]) -> dict[frozenset[int], list[frozenset[Pair]]]:
    """The conditions (one or two pairs of some run of ``left``) no as-asked run has, by the runs each covers."""
    fits: dict[frozenset[int], list[frozenset[Pair]]] = {}
    held = [_pairs(r.flags) for r in left]
    tried: set[frozenset[Pair]] = set()
    for size in range(1, MAX_CONDITION + 1):
        for pairs in held:
            for combo in itertools.combinations(sorted(pairs), size):
                cond = frozenset(combo)
                if cond in tried or any(cond <= other for other in as_asked):
                    tried.add(cond)
                    continue
                tried.add(cond)
                fits.setdefault(frozenset(i for i, h in enumerate(held) if cond <= h), []).append(cond)
    return fits


def _rule(dest: str, value: Any, adjusted: Sequence[Any], condition: frozenset[Pair]) -> RunsAs:
    flags = adjusted[0].flags
    cond = tuple(sorted((k, flags[k]) for k, _ in condition))
    return RunsAs(dest, value, cond, tuple(sorted(r.trial_number for r in adjusted)))


class RunsAsBook:
    """The runs-as rules of one running sweep and what each measured configuration ran as. ``setters``: for
    each SGLang option (dest), the space's parameters that set it and their values (None: any value),
    grouped ones (``speculative.eagle3.speculative_num_draft_tokens``) too; :meth:`for_space` makes it."""

    def __init__(self, setters: dict[str, list[tuple[str, tuple[Any, ...] | None]]] | None = None,
                 fixed: Collection[str] = ()) -> None:
        self.setters = setters or {}
        self.fixed = frozenset(fixed)  # settings no parameter changes: left out of a rule's description
        self.rules: list[RunsAs] = []
        self._measured: dict[str, list[Any]] = {}  # the flags a configuration ran with (a key) -> its measured runs

    @classmethod
    def for_space(cls, space: SearchSpace) -> RunsAsBook:
        """A book whose :meth:`effective_params` knows which of ``space``'s parameters set each option."""
        setters: dict[str, list[tuple[str, tuple[Any, ...] | None]]] = {}
        for param in space.params:
            if param.target and param.target[0] == "flag":
                values = param.values()
                setters.setdefault(param.target[1], []).append((param.name, None if values is None else tuple(values)))
        return cls(setters, space.fixed_flags())

    def refresh(self, runs: Sequence[Any]) -> list[RunsAs]:
        """Derive the rules from the sweep's runs; returns the new ones (a new condition, not only
        more trials behind one)."""
        before = {(r.dest, repr(r.value), r.condition) for r in self.rules}
        self.rules = learn(runs)
        self._measured = {}
        for r in sorted(_measured(runs), key=lambda r: r.trial_number):
            self._measured.setdefault(_flags_key({**r.flags, **(r.ran_as or {})}), []).append(r)
        return [r for r in self.rules if (r.dest, repr(r.value), r.condition) not in before]

    def runs_as(self, config: Config) -> tuple[Any, str] | None:
        """The measured run ``config`` would repeat as SGLang runs it (a rule changes it into what that
        run ran as, or it asks for what that run ran as), and why; None when the configuration it runs
        as is unmeasured."""
        flags, used = dict(config.flags), []
        for rule in self.rules:
            if rule.covers(config.flags):
                flags[rule.dest] = rule.value
                used.append(rule)
        env = dict(config.env)  # the same environment: a run's key is of its flags as asked and its env
        prior = next((r for r in self._measured.get(_flags_key(flags), [])
                      if Config(params={}, flags=r.flags, env=env).key() == r.config_key), None)
        if prior is None:
            return None
        return prior, "; ".join(self.describe(r) for r in used) or f"trial {prior.trial_number} ran as it asks"

    def effective_params(self, params: dict[str, Any], flags: dict[str, Any],
                         ran_as: dict[str, Any] | None = None) -> dict[str, Any]:
        """``params`` as the server runs them: a parameter that sets an option SGLang runs otherwise
        (as the launch's ``ran_as`` reports, else as a rule says) takes the value it runs as, where that
        is one of the parameter's values, so a failure at "EP 1" that SGLang ran at EP 8 is learned,
        and judged, at EP 8. A parameter named as the option counts without :attr:`setters`."""
        runs = dict(ran_as) if ran_as else {r.dest: r.value for r in self.rules if r.covers(flags)}
        out = dict(params)
        for dest, value in runs.items():
            for name, values in self.setters.get(dest, [(dest, None)]):
                alike = [value] if values is None else [v for v in values if same_value(value, v)]
                if name in params and alike:
                    out[name] = alike[0]
        return out

    def records(self) -> list[tuple[str, dict[str, Any]]]:
        """(text, JSON form) of every rule, for the store."""
        return [(self.describe(r), r.as_dict()) for r in self.rules]

    def describe(self, rule: RunsAs) -> str:
        """``rule`` in words, without the settings no parameter of the space changes."""
        return rule.describe(self.fixed)


def _measured(runs: Iterable[Any]) -> list[Any]:
    """The first measurements of configurations that ran (not repeats, not failures): what a server reported."""
    return [r for r in runs if r.status == RunStatus.OK and r.repeat_of is None]


def _flags_key(flags: dict[str, Any]) -> str:
    return Config(params={}, flags=flags).key()
