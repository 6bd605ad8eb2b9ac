"""Failures learned: which settings cause a failure, worked out from the sweep's own launches.

A :class:`Rule` is a conjunction of ``parameter in {values}`` that every failure it explains has and
no successful configuration has. Rules are derived again from all launches after each one (so a
resumed sweep derives the same rules, and a rule that a success contradicts is gone), per failure
*signature* (kind plus the reason line with its numbers blanked):

1. **Named by the log.** The parameters whose setting the reason line names (an option or a dest name,
   as this SGLang or another spells it: ``--cuda-graph-max-bs-decode``; a value such as ``mxfp4``; a
   checkpoint format as SGLang calls it: ``modelopt_fp4``; a backend, a parallelism or the draft width
   in words: "FlashAttention v3", "expert parallelism", "EP", "topk"), or whose *other* value it names
   ("supports only the modelopt_fp4 quantization" on an MXFP4 checkpoint),
   form the rule's core; if a success has that core, the smallest set of the failing
   configuration's other settings that makes it consistent is added. Where the line states the
   values it needs ("requires ep_size == tp_size (8)"), a lower bound ("EP needs at least 4 ranks"),
   or names a parallelism as a feature (every size above 1 then), the rule covers the setting's
   other values too, unless a success has them.
2. **By contrast.** Otherwise, the smallest set of setting=value pairs present in every failure of
   the signature and in no success (up to :data:`MAX_RULE_SIZE` pairs). When several sets of that
   size fit, each becomes a *suspected* rule until more launches tell them apart (never a guess),
   and all of them joined is one more rule: the narrow corner around the failures.

One rule explains several failures of a signature only where they differ in parameters whose every
value failed (``ep_size`` failing at 1, 2 and 4 says nothing about 8); otherwise each failure gets its
own rule, and rules that differ in one parameter's values merge.

A rule is *confirmed* (it stops a matching proposal before launch) when the evidence justifies its
reach: two or more failing configurations support it and, where they differ, they failed at every
value of that parameter; or three different failing configurations support it (found by contrast
for one setting: where no other setting was alike in all three, else that setting stays a possible
co-cause); or two do, for a rule of two or more settings found by contrast (the smallest such rule:
each of its settings ran without the others, so with a co-cause it would be three settings failing
together; the corner that joins several explanations which tie is confirmed alike); or the log
named it with two or more settings. Otherwise it is *suspected*: it only weighs the sampler's proposals down
(:meth:`tuner.rule_book.RuleBook.feasibility`), so a setting that failed once, or that failed with
two of three checkpoint formats, is still tried with the third when the model expects it to pay; and
the tight box the supporting failures span is confirmed instead.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from core.flags import spellings
from tuner.space import SearchSpace

MAX_RULE_SIZE = 3
SUSPECT_ODDS = 0.25  # weight on a proposal a suspected rule of one failure covers, the rest kept (tuner.rule_book)
CONFIRMING_FAILURES = 3  # this many different failing configurations confirm a rule named by the log, or one
# found by contrast where no other setting was alike in all of them
CONFIRMING_INTERACTION = 2  # ... or one found by contrast of two or more settings (the co-cause check is then moot)
Pair = tuple[str, Any]
# How SGLang's messages name a checkpoint's format (its --quantization names), by the word a model
# path or quantization setting carries: "supports only the modelopt_fp4 quantization" names NVFP4.
QUANTIZATION_ALIASES = {"nvfp4": ("modelopt_fp4", "nvfp4_online", "petit_nvfp4"),
                        "mxfp4": ("quark_mxfp4",), "fp8": ("modelopt_fp8", "w8a8_fp8")}
CHECKPOINT_DESTS = ("model_path", "quantization")
# How SGLang's messages spell an attention backend in words ("FlashAttention v3 Backend requires SM>=80
# and SM<=90" is --attention-backend fa3): the phrase, and the value's word it stands for.
BACKEND_PHRASES = ((re.compile(r"\bflash[ _-]?attention[ _-]?(?:v|version[ _-]?)?([34])\b", re.IGNORECASE), "fa{}"),)
# How they name a setting in words: a parallelism as its long option does (``--expert-parallel-size`` is
# ``--ep-size``): "cutlass fp8 MoE does not support expert parallelism" names ``ep_size``; not "data
# parallel": three options say it (``--dp-size``, ``--attn-dp-size``, ``--moe-dp-size``); or as its
# capitals, as SGLang's docs and messages do ("mooncake EP needs at least 4 ranks"; not "DeepEP", "TP0").
# And the draft tree's width as SGLang's checks spell ``--speculative-eagle-topk``: "trtllm_mha backend
# only supports topk = 1", "triton attention with topk > 1 is not supported in CUDA graphs".
PARALLELISMS = (("tensor", "TP", "tp_size"), ("pipeline", "PP", "pp_size"), ("expert", "EP", "ep_size"))
SETTING_PHRASES = (*((re.compile(rf"\b{word}[ _-]?parallel(?:ism|[ _-]?size)?\b", re.IGNORECASE), dest)
                     for word, _, dest in PARALLELISMS),
                   *((re.compile(rf"\b{capitals}\b"), dest) for _, capitals, dest in PARALLELISMS),
                   (re.compile(r"\btopk\b", re.IGNORECASE), "speculative_eagle_topk"))
# A parallelism named as a feature, not as a size, is that size above 1 ("does not support expert
# parallelism" at EP 2 is about EP 4 and 8 as well).
PARALLELISM_FEATURES = tuple((re.compile(rf"\b{word}[ _-]?parallelism\b", re.IGNORECASE), dest)
                             for word, _, dest in PARALLELISMS)
# The tool's own words about a failure's exit status ("exited with code 1", "(exit 137)") name no setting.
EXIT_STATUS = re.compile(r"exited with code -?\d+|\(exit -?\d+\)")
# A log line that compares or negates does not state plainly which values a setting needs.
NEGATIONS = "not|cannot|unsupported|no"
STATED_HEDGES = re.compile(rf"[<>]|\b(at least|at most|minimum|maximum|{NEGATIONS})\b", re.IGNORECASE)
# A bound a line states for a setting it names ("mooncake EP needs at least 4 ranks"), not negated.
LOWER_BOUND = re.compile(r"(?:\bat least|>=)\s*(\d+)\b", re.IGNORECASE)
NEGATION = re.compile(rf"\b({NEGATIONS})\b", re.IGNORECASE)


@dataclass(frozen=True)
class Observation:
    """One launch as the learner sees it: its parameters and, if it failed, kind and reason."""

    trial_number: int
    params: dict[str, Any]
    failure_kind: str | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        """True when the launch produced a measurement."""
        return self.failure_kind is None


@dataclass(frozen=True)
class Rule:
    """``params`` (name -> the values that fail) together cause ``kind`` (see module docstring)."""

    params: tuple[tuple[str, tuple[Any, ...]], ...]
    kind: str
    signature: str
    trials: tuple[int, ...]
    named: bool
    confirmed: bool

    def matches(self, params: dict[str, Any]) -> bool:
        """True when ``params`` has every setting of the rule."""
        return all(name in params and params[name] in values for name, values in self.params)

    def describe(self, domains: dict[str, list[Any]] | None = None) -> str:
        """``moe_a2a_backend=deepep with ep_size != 8 -> config_error, from trials 3, 9``."""
        parts = [_condition(name, values, (domains or {}).get(name)) for name, values in self.params]
        how = "named by the log" if self.named else "by contrast with the successes"
        state = "" if self.confirmed else "suspected, "
        return (f"{' with '.join(parts)} -> {self.kind}, from trial{'s' if len(self.trials) > 1 else ''} "
                f"{', '.join(map(str, self.trials))} ({state}{how})")

    def as_dict(self) -> dict[str, Any]:
        """JSON form (stored with the sweep)."""
        return {"params": [[n, list(v)] for n, v in self.params], "kind": self.kind, "signature": self.signature,
                "trials": list(self.trials), "named": self.named, "confirmed": self.confirmed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        """Inverse of :meth:`as_dict`."""
        return cls(params=tuple((n, tuple(v)) for n, v in data["params"]), kind=data["kind"],
                   signature=data["signature"], trials=tuple(data["trials"]), named=data["named"],
                   confirmed=data["confirmed"])


def _condition(name: str, values: tuple[Any, ...], domain: list[Any] | None) -> str:
    if len(values) == 1:
        return f"{name}={values[0]}"
    rest = [v for v in domain or [] if v not in values]
    if domain and len(rest) == 1:
        return f"{name} != {rest[0]}"
    return f"{name} in {{{', '.join(map(str, values))}}}"


def signature(kind: str, reason: str) -> str:
    """The failure's identity across configurations: its kind and reason with numbers blanked."""
    return f"{kind}: " + re.sub(r"\d+(\.\d+)?", "#", reason)[:200]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _tokens(text: str) -> set[str]:
    words = {t.lower() for t in re.findall(r"[A-Za-z0-9_./-]+", text)} | {
        t.lower() for t in re.findall(r"[A-Za-z0-9_]+", text)}
    return words | {word.format(*m.groups()) for phrase, word in (*BACKEND_PHRASES, *SETTING_PHRASES)
                    for m in phrase.finditer(text)}


class Learner:
    """Derives rules for one search space (its parameters' settings tell what a log line names)."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.domains: dict[str, list[Any]] = {p.name: p.values() or [] for p in space.params}
        self._params = {p.name: p for p in space.params}

    def _names(self, name: str, value: Any) -> set[str]:
        """The words that, in a log line, name the setting ``name=value``."""
        param = self._params.get(name)
        words = {name.lower(), name.rsplit(".", 1)[-1].lower()}
        settings: dict[str, Any] = {}
        if param is not None and param.target is None and value in param.options:
            option = param.options[value]
            settings = {**option.flags, **option.env}
            words.add(str(value).lower())
        elif param is not None and param.target is not None:
            settings = {param.target[1]: value}
        for dest, set_value in settings.items():
            for spelled in spellings(dest):  # a log of 0.5.23 says --cuda-graph-max-bs-decode
                words |= {spelled, spelled.replace("_", "-"), "--" + spelled.replace("_", "-")}
            text = set_value.lower() if isinstance(set_value, str) and not set_value.isdigit() else ""
            if len(text) >= 3:
                words.add(text)
            if dest in CHECKPOINT_DESTS:  # "supports only the modelopt_fp4 quantization": the checkpoint's format
                words |= {"quantization", *(alias for fmt, aliases in QUANTIZATION_ALIASES.items()
                                            if text and fmt in text for alias in aliases)}
        if isinstance(value, str) and len(value) >= 3:
            words.add(value.lower())
        return {w for w in words if len(w) >= 3}

    def named_pairs(self, obs: Observation) -> list[Pair]:
        """The failing configuration's settings that its reason line names, and those whose *other*
        value it names ("flashinfer_trtllm supports only the modelopt_fp4 quantization" on an MXFP4
        checkpoint names the checkpoint setting too: the failure is about this value not being that)."""
        tokens = _tokens(obs.reason)
        direct = [(n, v) for n, v in sorted(obs.params.items()) if self._names(n, v) & tokens]
        rest = tokens - set().union(*(self._names(n, v) for n, v in direct))  # "triton" named the attention
        other = [(n, v) for n, v in sorted(obs.params.items()) if (n, v) not in direct and any(
            self._only_names(n, u) & rest for u in self.domains.get(n, ()) if u != v)]
        return sorted([*direct, *other], key=repr)

    def names_value(self, name: str, value: Any, reason: str) -> bool:
        """Does ``reason`` name ``name=value`` ("requires ep_size == tp_size (8)" names ``ep_size=8``;
        "supports kv_cache_dtype fp8_e4m3 or auto" names ``kv_cache_dtype=auto``)? A number counts as
        a whole word; a word as in :meth:`named_pairs`."""
        if _is_number(value):
            said = EXIT_STATUS.sub("", reason)
            return str(value) in set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", said))
        return bool(self._only_names(name, value) & _tokens(reason))

    def _only_names(self, name: str, value: Any) -> set[str]:
        """The words that name ``name=value`` and no other value of ``name``."""
        others = [self._names(name, u) for u in self.domains.get(name, ()) if u != value]
        return self._names(name, value) - set().union(*others)

    def learn(self, observations: Iterable[Observation]) -> list[Rule]:
        """Every rule the launches support (see module docstring), in order of first evidence."""
        launches = list(observations)
        successes = [frozenset(_pairs(o.params)) for o in launches if o.ok]
        groups: dict[str, list[Observation]] = {}
        for o in launches:
            if not o.ok and o.params:
                groups.setdefault(signature(o.failure_kind or "", o.reason), []).append(o)
        rules: list[Rule] = []
        for sig, failures in groups.items():
            rules.extend(_merge(self._rules_for(sig, failures, successes)))
        return rules

    def _covered(self, failures: list[frozenset[Pair]]) -> bool:
        """May one rule generalise over the settings these failures differ in? Only over a parameter
        whose every value failed: ``ep_size`` failing at 1, 2 and 4 says nothing about 8."""
        for name, domain in self.domains.items():
            seen = {v for f in failures for n, v in f if n == name}
            if len(seen) > 1 and domain and not set(domain) <= seen:
                return False
        return True

    def _rules_for(self, sig: str, failures: list[Observation], successes: list[frozenset[Pair]]) -> list[Rule]:
        distinct = {frozenset(_pairs(f.params)): f for f in failures}

        def judged(cause: frozenset[Pair], named: bool) -> list[Rule]:
            return self._judged(cause, [f for p, f in distinct.items() if p >= cause], sig, named)

        if len(distinct) > 1 and self._covered(list(distinct)):
            together = _minimal_causes(frozenset.intersection(*distinct), successes)
            if len(together) == 1:
                return judged(together[0], any(set(together[0]) & set(self.named_pairs(f)) for f in failures))
        rules: list[Rule] = []
        for pairs, f in distinct.items():
            core = frozenset(self.named_pairs(f))
            causes = _minimal_causes(pairs, successes, core) if core else []
            named = bool(causes)
            causes = causes or _minimal_causes(pairs, successes)
            if len(causes) == 1:
                rules.extend(self._as_stated(r, f, successes) if named else r for r in judged(causes[0], named))
            elif causes:  # several explanations fit: each is a suspect until more launches tell them apart,
                rules.extend(_rule(c, failures, sig, named, False) for c in causes)
                rules.extend(judged(frozenset().union(*causes), named))  # all of them together: the corner
        return rules

    def _as_stated(self, rule: Rule, failure: Observation, successes: list[frozenset[Pair]]) -> Rule:
        """``rule`` over every value of a setting that the failure's log says is not what it needs:
        "DeepEP requires ep_size == tp_size (8)" after a failure at EP 1 covers EP 1, 2 and 4, and
        "does not support expert parallelism" at EP 2 covers 4 and 8. Only where the line states what
        it needs plainly (:meth:`stated_values`, :meth:`parallelism_off`, :meth:`lower_bound`) and no success
        contradicts."""
        params = []
        for name, values in rule.params:
            stated = (self.stated_values(name, values[0], failure.reason)
                      or self.parallelism_off(name, values[0], failure.reason)
                      or self.lower_bound(name, values[0], failure.reason)) if len(values) == 1 else None
            domain = self.domains.get(name) or []
            params.append((name, tuple(v for v in domain if v not in stated) if stated else values))
        widened = replace(rule, params=tuple(params))
        return rule if any(widened.matches(dict(s)) for s in successes) else widened

    def stated_values(self, name: str, value: Any, reason: str) -> set[Any] | None:
        """The values of ``name`` that ``reason`` says are required, when it names the setting itself and
        other values of it plainly ("requires ep_size == tp_size (8)", "supports kv_cache_dtype fp8_e4m3
        or auto"); None where it names none, or compares or negates (">", "at least", "not": a reading
        of those would be a guess)."""
        said = EXIT_STATUS.sub("", reason)
        if STATED_HEDGES.search(said):
            return None
        domain = self.domains.get(name) or []
        if not self._names_setting(name, said):
            return None
        stated = {u for u in domain if u != value and self.names_value(name, u, said)}
        return stated or None

    def lower_bound(self, name: str, value: Any, reason: str) -> set[Any] | None:
        """The values of ``name`` at or above the bound ``reason`` states for it ("mooncake EP needs at
        least 4 ranks" at EP 1: EP 4 and 8), where the line names the setting, is not negated, and
        ``value`` is below that bound (else the number is about something else). None otherwise."""
        said = EXIT_STATUS.sub("", reason)
        bounds = [int(m[1]) for m in LOWER_BOUND.finditer(said)]
        domain = self.domains.get(name) or []
        if len(bounds) != 1 or NEGATION.search(said) or not all(_is_number(u) for u in domain):
            return None
        if not self._names_setting(name, said) or not value < bounds[0]:
            return None
        return {u for u in domain if u >= bounds[0]} or None

    def _names_setting(self, name: str, said: str) -> bool:
        """Does ``said`` name the setting ``name`` itself (a word every value of it has: its option)?"""
        domain = self.domains.get(name) or []
        setting = set.intersection(*(self._names(name, u) for u in domain)) if domain else set()
        return bool(setting & _tokens(said))

    def parallelism_off(self, name: str, value: Any, reason: str) -> set[Any] | None:
        """``{1}`` where ``reason`` names the parallelism that ``name`` sizes as a feature ("cutlass fp8
        MoE does not support expert parallelism") and ``value`` turns it on: the line is about every
        size above 1, not the one that failed. None otherwise."""
        if isinstance(value, bool) or not isinstance(value, int) or value == 1 or 1 not in self.domains.get(name, ()):
            return None
        words = self._names(name, value)
        return {1} if any(dest in words and phrase.search(reason) for phrase, dest in PARALLELISM_FEATURES) else None

    def _judged(self, cause: frozenset[Pair], supports: list[Observation], sig: str, named: bool) -> list[Rule]:
        """``cause`` as a confirmed rule where the evidence justifies it; else a suspected rule, plus
        (with two or more supporting failures) the tight box around them as a confirmed one."""
        spans = _spans(supports, {n for n, _ in cause})
        justified = all(set(vals) >= set(self.domains.get(n) or vals) for n, vals in spans.items() if len(vals) > 1)
        apart = not any(len(vals) == 1 for vals in spans.values())  # no other setting all of them had alike
        if (justified and (len(supports) > 1 or (named and len(cause) > 1))) or \
                (len(supports) >= CONFIRMING_FAILURES and (named or apart)) or \
                (not named and len(cause) > 1 and len(supports) >= CONFIRMING_INTERACTION):
            return [_rule(cause, supports, sig, named, True)]
        rules = [_rule(cause, supports, sig, named, False)]
        if len(supports) > 1:
            narrow = [(n, vals) for n, vals in spans.items() if not set(vals) >= set(self.domains.get(n) or ())]
            box = Rule(params=tuple(sorted([*((n, (v,)) for n, v in cause), *narrow], key=repr)),
                       kind=supports[0].failure_kind or "", signature=sig,
                       trials=tuple(sorted(f.trial_number for f in supports)), named=named, confirmed=True)
            rules.append(box)
        return rules


def _spans(supports: list[Observation], skip: set[str]) -> dict[str, tuple[Any, ...]]:
    """For each parameter every supporting failure has (but those in ``skip``): the values they had."""
    names = set.intersection(*(set(f.params) for f in supports)) - skip
    return {n: tuple(sorted({f.params[n] for f in supports}, key=repr)) for n in sorted(names)}


def _pairs(params: dict[str, Any]) -> list[Pair]:
    return [(n, v) for n, v in params.items() if isinstance(v, str | int | float | bool)]


def _minimal_causes(pairs: frozenset[Pair], successes: Sequence[frozenset[Pair]],
                    core: frozenset[Pair] = frozenset()) -> list[frozenset[Pair]]:
    """The smallest supersets of ``core`` within ``pairs`` that no success contains (all of that size;
    none beyond :data:`MAX_RULE_SIZE` pairs)."""
    rest = sorted(pairs - core, key=repr)
    for extra in range(0 if core else 1, MAX_RULE_SIZE + 1 - len(core)):
        found = [core | frozenset(c) for c in itertools.combinations(rest, extra)
                 if not any(s >= core | frozenset(c) for s in successes)]
        if found:
            return found
    return []


def _rule(cause: frozenset[Pair], supports: list[Observation], sig: str, named: bool, confirmed: bool) -> Rule:
    trials = [f.trial_number for f in supports if all(f.params.get(n) == v for n, v in cause)]
    return Rule(params=tuple((n, (v,)) for n, v in sorted(cause, key=repr)), kind=supports[0].failure_kind or "",
                signature=sig, trials=tuple(sorted(set(trials))), named=named, confirmed=confirmed)


def _merge(rules: list[Rule]) -> list[Rule]:
    """Join rules of one signature whose settings differ in one parameter's values."""
    out: list[Rule] = []
    for rule in sorted(set(rules), key=lambda r: (r.trials, repr(r.params))):
        for i, other in enumerate(out):
            joined = _joined(other, rule)
            if joined is not None:
                out[i] = joined
                break
        else:
            out.append(rule)
    return out


def _joined(a: Rule, b: Rule) -> Rule | None:
    if [n for n, _ in a.params] != [n for n, _ in b.params]:
        return None
    differ = [i for i, (x, y) in enumerate(zip(a.params, b.params, strict=True)) if x[1] != y[1]]
    if len(differ) > 1:
        return None
    params = list(a.params)
    if differ:
        i = differ[0]
        name, values = a.params[i]
        params[i] = (name, tuple(sorted(set(values) | set(b.params[i][1]), key=repr)))
    return Rule(params=tuple(params), kind=a.kind, signature=a.signature,
                trials=tuple(sorted(set(a.trials) | set(b.trials))), named=a.named or b.named,
                confirmed=a.confirmed or b.confirmed)
