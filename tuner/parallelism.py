"""Parallelism sizes as searched settings: how many GPUs a configuration uses, and which combinations
of ``tp_size``, ``dp_size``, ``pp_size``, ``ep_size`` and ``enable_dp_attention`` SGLang refuses.

GPUs are counted as SGLang does: ``tp x pp x dp``, except that with ``--enable-dp-attention`` the DP
groups split the TP group (attention data parallelism), so ``--tp 8 --dp 8 --enable-dp-attention``
runs on 8 GPUs. Refused by SGLang, and so never launched: attention DP whose size does not divide TP,
an EP size that does not divide TP, and more GPUs than ``gpus_per_trial``. The top-level parameters
that set any of these are enumerated together (a few values each) and each refused combination
becomes a ``forbid`` rule of the space, so the sampler never proposes it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from core.errors import ConfigError
from core.types import Objective
from tuner.space import Param, SearchSpace

PARALLEL_DESTS = frozenset({"tp_size", "dp_size", "pp_size", "ep_size", "enable_dp_attention"})


def gpus_needed(flags: dict[str, Any]) -> int:
    """GPUs one server with these settings (dest names) uses."""
    tp, dp, pp = (_size(flags, d) for d in ("tp_size", "dp_size", "pp_size"))
    return tp * pp * (1 if flags.get("enable_dp_attention") else dp)


def refusal(flags: dict[str, Any], gpus: int) -> str | None:
    """Why SGLang (or a group of ``gpus`` GPUs) refuses these parallel settings; None when it does not."""
    tp, dp, ep = (_size(flags, d) for d in ("tp_size", "dp_size", "ep_size"))
    if flags.get("enable_dp_attention") and tp % dp:
        return f"dp_size {dp} with enable_dp_attention must divide tp_size {tp}"
    if tp % ep:
        return f"ep_size {ep} must divide tp_size {tp}"
    if gpus_needed(flags) > gpus:
        how = "tp_size x pp_size (dp attention splits TP)" if flags.get("enable_dp_attention") else \
            "tp_size x dp_size x pp_size"
        return f"{how} = {gpus_needed(flags)} GPUs, but gpus_per_trial is {gpus}"
    return None


def _size(flags: dict[str, Any], dest: str) -> int:
    value = flags.get(dest)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _parallel(param: Param) -> bool:
    if param.conditions or param.values() is None:
        return False
    return any(PARALLEL_DESTS & set(param.flags_for(v)) for v in param.values() or [])


def with_parallel_rules(space: SearchSpace) -> SearchSpace:
    """``space`` with a forbid rule for each refused combination of its parallel settings; ConfigError
    when the base settings, or one value in every combination, are refused."""
    gpus = space.file.gpus_per_trial
    if (why := refusal(dict(space.base.flags), gpus)) is not None:
        raise ConfigError(f"{space.path}: base: {why}")
    params = _parallel_params(space)
    if not params:
        return space
    refused: set[tuple[Any, ...]] = set()
    fits: dict[tuple[str, Any], str | None] = {}
    for values, flags in _combinations(space, params):
        why = refusal(flags, gpus)
        if why is not None:
            refused.add(values)
        for p, v in zip(params, values, strict=True):
            if fits.get((p.name, v), "") is not None:
                fits[(p.name, v)] = why
    for (name, value), why in fits.items():
        if why is not None:
            param = next(p for p in params if p.name == name)
            raise ConfigError(f"{param.path}{_where(param, value)}: {why}")
    rules = [{params[i].name: (v,) for i, v in cause} for cause in _smallest_causes(params, refused)]
    return replace(space, forbid=(*space.forbid, *rules))


def gpu_sizes(space: SearchSpace) -> list[int]:
    """The distinct GPU counts the space's configurations need, smallest first: one value unless its
    parallel sizes are searched (e.g. [1, 2, 4, 8] for ``tp_size: {choices: [1, 2, 4, 8]}``)."""
    sizes = {gpus_needed(flags) for _, flags in _combinations(space, _parallel_params(space))
             if refusal(flags, space.file.gpus_per_trial) is None}
    return sorted(sizes) if len(sizes) > 1 else [space.file.gpus_per_trial]


def slot_gpus(sizes: list[int]) -> int:
    """GPUs per GPU group (slot) for servers of these ``sizes`` (:func:`gpu_sizes`): the largest that
    divides every size, so a trial of N GPUs takes N / slot_gpus groups of one node."""
    return math.gcd(*sizes)


def per_objective(tok_s: float, flags: dict[str, Any], objective: str | None) -> float:
    """What a sweep with this ``objective`` (a :class:`core.types.Objective` value; None: per server)
    maximizes for a configuration measured at ``tok_s``: per GPU divides by the GPUs its server uses."""
    return tok_s / gpus_needed(flags) if objective == Objective.PER_GPU else tok_s


def _parallel_params(space: SearchSpace) -> list[Param]:
    return [p for p in space.params if _parallel(p)]


def _combinations(space: SearchSpace, params: list[Param]) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every combination of ``params``' values, with the base settings it makes (none without params)."""
    if not params:
        return
    for values in itertools.product(*(p.values() or [] for p in params)):
        flags = dict(space.base.flags)
        for p, v in zip(params, values, strict=True):
            flags.update(p.flags_for(v))
        yield values, flags


def _smallest_causes(params: list[Param], refused: set[tuple[Any, ...]]) -> list[tuple[tuple[int, Any], ...]]:
    """The refused combinations as the fewest settings that refuse them whatever the others are
    (``tp_size 1`` with ``ep_size 8`` is refused at any ``dp_size``): so a sampler that picks one setting
    at a time sees the conflict as soon as its second setting is picked."""
    domains = [p.values() or [] for p in params]
    left = set(refused)
    causes: list[tuple[tuple[int, Any], ...]] = []
    for size in range(1, len(params) + 1):
        for positions in itertools.combinations(range(len(params)), size):
            for values in itertools.product(*(domains[i] for i in positions)):
                matching = {c for c in refused if all(c[i] == v for i, v in zip(positions, values, strict=True))}
                if matching & left and len(matching) == math.prod(
                        len(domains[i]) for i in range(len(params)) if i not in positions):
                    causes.append(tuple(zip(positions, values, strict=True)))
                    left -= matching
    return causes


def _where(param: Param, value: Any) -> str:
    if param.target is None:
        return f".choices.{value}"
    return f".choices[{(param.values() or []).index(value)}]"
