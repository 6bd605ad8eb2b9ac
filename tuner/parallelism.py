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
from dataclasses import replace
from typing import Any

from core.errors import ConfigError
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
    base = dict(space.base.flags)
    if (why := refusal(base, gpus)) is not None:
        raise ConfigError(f"{space.path}: base: {why}")
    params = [p for p in space.params if _parallel(p)]
    if not params:
        return space
    rules: list[dict[str, tuple[Any, ...]]] = []
    fits: dict[tuple[str, Any], str | None] = {}
    for values in itertools.product(*(p.values() or [] for p in params)):
        flags = dict(base)
        for p, v in zip(params, values, strict=True):
            flags.update(p.flags_for(v))
        why = refusal(flags, gpus)
        if why is not None:
            rules.append({p.name: (v,) for p, v in zip(params, values, strict=True)})
        for p, v in zip(params, values, strict=True):
            if fits.get((p.name, v), "") is not None:
                fits[(p.name, v)] = why
    for (name, value), why in fits.items():
        if why is not None:
            param = next(p for p in params if p.name == name)
            raise ConfigError(f"{param.path}{_where(param, value)}: {why}")
    return replace(space, forbid=(*space.forbid, *rules))


def _where(param: Param, value: Any) -> str:
    if param.target is None:
        return f".choices.{value}"
    return f".choices[{(param.values() or []).index(value)}]"
