"""Parallelism sizes as searched settings: GPUs counted as SGLang counts them, refused combinations
never proposed, and a value that can never run refused at load in one line."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from tuner.parallelism import gpus_needed
from tuner.space_loader import load_space

SEARCHED = """name: t
gpus_per_trial: 8
base: {model_path: /m}
params:
  tp_size: {choices: [4, 8]}
  dp_size: {choices: [1, 2, 8]}
  enable_dp_attention: {choices: [false, true]}
  ep_size: {choices: [1, 8]}
"""


def test_dp_attention_splits_the_tp_group(write_yaml) -> None:  # type: ignore[no-untyped-def]
    card = "name: t\ngpus_per_trial: 8\nbase: {model_path: /m, tp_size: 8, dp_size: 8, enable_dp_attention: true}\n"
    space = load_space(write_yaml(card))  # the DeepSeek model cards' form for one 8-GPU node
    assert gpus_needed(space.baseline().flags) == 8
    replicas = card.replace(", enable_dp_attention: true", "")
    with pytest.raises(ConfigError, match=r"base: tp_size x dp_size x pp_size = 64 GPUs, but gpus_per_trial is 8"):
        load_space(write_yaml(replicas))


def test_searched_sizes_list_exactly_the_combinations_sglang_runs(write_yaml) -> None:  # type: ignore[no-untyped-def]
    space = load_space(write_yaml(SEARCHED))
    listed = {(p["tp_size"], p["dp_size"], p["enable_dp_attention"], p["ep_size"]) for p in space.iter_configs()}
    # worked out by hand: GPUs = tp x dp without attention DP (at most 8), tp with it (dp must divide tp);
    # ep must divide tp
    fits = {(4, 1, False), (4, 1, True), (4, 2, False), (4, 2, True),
            (8, 1, False), (8, 1, True), (8, 2, True), (8, 8, True)}
    expected = {(tp, dp, attn, ep) for tp, dp, attn in fits for ep in (1, 8) if tp % ep == 0}
    assert listed == expected and len(expected) == 12
    for params in space.iter_configs():
        assert gpus_needed(space.from_params(params).flags) <= 8
    assert space.violates({"tp_size": 8, "dp_size": 2, "enable_dp_attention": False, "ep_size": 1})
    assert not space.violates({"tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "ep_size": 8})


def test_a_value_that_never_fits_is_refused_at_load(write_yaml) -> None:  # type: ignore[no-untyped-def]
    text = SEARCHED.replace("ep_size: {choices: [1, 8]}", "ep_size: {choices: [1, 16]}")
    with pytest.raises(ConfigError, match=r"params\.ep_size\.choices\[1\]: ep_size 16 must divide tp_size 8"):
        load_space(write_yaml(text))
