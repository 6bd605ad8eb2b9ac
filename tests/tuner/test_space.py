"""Search-space files: validation messages, sampling, conditional params, forbid rules, hardware."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from core.errors import ConfigError, FlagError
from core.flags import FlagTable
from tests.conftest import SPACES
from tuner.sampler import make_sampler
from tuner.space_loader import load_space

TABLE = FlagTable.bundled("0.5.23")

GOOD = """
name: t
gpus_per_trial: 4
base: {model_path: /m, tp_size: 4}
params:
  quant_format:
    choices:
      mxfp4: {model_path: /m}
      nvfp4: {model_path: /m-nvfp4}
  moe_runner_backend: {choices: [auto, triton, marlin]}
  speculative:
    choices:
      "off": {}
      mtp: {speculative_algorithm: EAGLE, speculative_num_steps: {int: [1, 4]}}
  ep_size: {choices: [1, 2, 4]}
  nccl_proto: {env: NCCL_PROTO, choices: [LL, Simple]}
  topk: {flag: speculative_eagle_topk, choices: [1, 2], when: {speculative: mtp}}
forbid:
  - {quant_format: mxfp4, moe_runner_backend: marlin}
"""


def test_bundled_spaces_validate() -> None:
    for path in sorted(SPACES.glob("*.yaml")):
        space = load_space(path, TABLE)
        assert space.cardinality() > 0, path


BROKEN = {
    "unknown key": ("name: t\nparms: {}\n", "parms: unknown key"),
    "bad choice": ("name: t\nparams:\n  moe_runner_backend: {choices: [auto, marlinn]}\n",
                   "params.moe_runner_backend.choices[1]: 'marlinn' is not a --moe-runner-backend of "
                   "SGLang 0.5.23 (did you mean 'marlin'?)"),
    "wrong type": ("name: t\nparams:\n  ep_size: {choices: [1, two]}\n",
                   "params.ep_size.choices[1]: 'two' is not an integer for --ep-size"),
    "forbid unknown param": ("name: t\nparams:\n  ep_size: {choices: [1, 2]}\nforbid:\n  - {ep: 1}\n",
                             "forbid[0].ep: unknown parameter"),
    "conditional without parent": (
        "name: t\nparams:\n  speculative_num_steps: {int: [1, 3], when: {speculative: mtp}}\n",
        "params.speculative_num_steps.when.speculative: conditional parameter without its parent"),
    "range min > max": ("name: t\nparams:\n  ep_size: {int: [4, 1]}\n",
                        "params.ep_size: range min 4 is greater than max 1"),
    "unknown flag in base": ("name: t\nbase: {cuda_graph_maxbs: 8}\n",
                             "base.cuda_graph_maxbs: 'cuda_graph_maxbs' is not an option of SGLang 0.5.23"),
    "nested bad range": (
        "name: t\nparams:\n  s:\n    choices:\n      mtp: {speculative_num_steps: {int: [3, 1]}}\n",
        "params.s.choices.mtp.speculative_num_steps: range min 3 is greater than max 1"),
    "benchmark wrong type": ("name: t\nbenchmark: {concurrency: many}\n", "benchmark.concurrency: 'many'"),
    "more GPUs than a trial has": ("name: t\ngpus_per_trial: 2\nbase: {tp_size: 2}\nparams:\n"
                                   "  tp_size: {choices: [1, 2, 4]}\n",
                                   "params.tp_size.choices[2]: tp_size x dp_size x pp_size = 4 GPUs, but "
                                   "gpus_per_trial is 2"),
    "forbid bad value": ("name: t\nparams:\n  ep_size: {choices: [1, 2]}\nforbid:\n  - {ep_size: 3}\n",
                         "forbid[0].ep_size: 3 is not a value of parameter 'ep_size'"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_files_give_one_line_with_key_path(case: str, write_yaml) -> None:  # type: ignore[no-untyped-def]
    text, expected = BROKEN[case]
    path = write_yaml(text)
    with pytest.raises(ConfigError) as info:
        load_space(path, TABLE)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_speculative_mtp_name_is_rejected(write_yaml) -> None:  # type: ignore[no-untyped-def]
    path = write_yaml("name: t\nbase: {speculative_algorithm: MTP}\n")
    with pytest.raises(FlagError, match="'MTP' is not a --speculative-algorithm"):
        load_space(path, TABLE)


def test_sampling_respects_conditions_and_forbid(write_yaml) -> None:  # type: ignore[no-untyped-def]
    space = load_space(write_yaml(GOOD), TABLE)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(space, seed=1, strategy="tpe"))
    seen_mtp = seen_off = 0
    for i in range(120):
        trial = study.ask()
        config = space.sample(trial)
        params = config.params
        assert not (params["quant_format"] == "mxfp4" and params["moe_runner_backend"] == "marlin")
        if params["speculative"] == "mtp":
            seen_mtp += 1
            assert config.flags["speculative_algorithm"] == "EAGLE"
            assert "speculative.mtp.speculative_num_steps" in params
            assert "topk" in params
        else:
            seen_off += 1
            assert "speculative_algorithm" not in config.flags
            assert "topk" not in params and "speculative.mtp.speculative_num_steps" not in params
        assert config.env["NCCL_PROTO"] == params["nccl_proto"]
        expected_path = "/m-nvfp4" if params["quant_format"] == "nvfp4" else "/m"
        assert config.flags["model_path"] == expected_path
        study.tell(trial, float(i % 7))
    assert seen_mtp and seen_off


def test_baseline_trial_without_params_leaves_multivariate_sampling_on(write_yaml) -> None:  # type: ignore[no-untyped-def]
    """The sweep's baseline trial has no parameters; the joint (relative) search space must still hold
    the parameters every other trial shares, else multivariate TPE silently samples independently."""
    space = load_space(write_yaml(GOOD), TABLE)
    sampler = make_sampler(space, seed=3, strategy="tpe")
    study = optuna.create_study(direction="maximize", sampler=sampler)
    baseline = study.ask()
    study.tell(baseline, 1.0)  # base settings only: no suggest_* calls
    for i in range(4):
        trial = study.ask()
        space.sample(trial)
        study.tell(trial, float(i))
    joint = sampler.infer_relative_search_space(study, study.ask())
    assert {"quant_format", "moe_runner_backend", "speculative", "nccl_proto"} <= set(joint)
    assert "topk" not in joint  # conditional: not every trial has it


def test_cardinality_counts_conditionals_and_forbid(write_yaml) -> None:  # type: ignore[no-untyped-def]
    space = load_space(write_yaml(GOOD), TABLE)
    # quant 2 x backend 3 x (off 1 + mtp 4 steps x 2 topk) x ep 3 x nccl 2, minus mxfp4+marlin
    per_quant_backend = (1 + 4 * 2) * 3 * 2
    assert space.cardinality() == (2 * 3 - 1) * per_quant_backend
    assert len(list(space.iter_configs())) == space.cardinality()


def test_a_small_space_keeps_its_listing_and_a_large_one_only_its_count(write_yaml, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import tuner.space

    space = load_space(write_yaml(GOOD), TABLE)
    assert space.listing() == tuple(space.iter_configs())
    monkeypatch.setattr(tuner.space, "LISTING_KEPT", space.cardinality() - 1)
    large = load_space(write_yaml(GOOD), TABLE)
    assert large.listing() is None and large.cardinality() == space.cardinality()
    continuous = load_space(write_yaml("name: t\nparams:\n  mem_fraction_static: {float: [0.7, 0.9]}\n"), TABLE)
    assert continuous.listing() is None


def test_continuous_space_is_infinite(write_yaml) -> None:  # type: ignore[no-untyped-def]
    space = load_space(write_yaml("name: t\nparams:\n  mem_fraction_static: {float: [0.7, 0.9]}\n"), TABLE)
    assert math.isinf(space.cardinality())


def test_hardware_rules_prune_choices(write_yaml) -> None:  # type: ignore[no-untyped-def]
    text = "name: t\nparams:\n  moe_runner_backend: {choices: [auto, flashinfer_trtllm, hpc_ops]}\n"
    path = write_yaml(text)
    sm120 = load_space(path, TABLE, "sm_120")
    assert sm120.params[0].choices == ("auto",)
    assert {p.choice for p in sm120.pruned} == {"flashinfer_trtllm", "hpc_ops"}
    assert load_space(path, TABLE, "sm_100").params[0].choices == ("auto", "flashinfer_trtllm")
    assert load_space(path, TABLE, "sm_90").params[0].choices == ("auto", "hpc_ops")


def test_all_choices_pruned_is_an_error(write_yaml) -> None:  # type: ignore[no-untyped-def]
    path = write_yaml("name: t\nparams:\n  moe_runner_backend: {choices: [flashinfer_trtllm]}\n")
    with pytest.raises(ConfigError, match="no choice can run on sm_120"):
        load_space(path, TABLE, "sm_120")


def test_from_params_round_trips_sampled_configs(write_yaml) -> None:  # type: ignore[no-untyped-def]
    space = load_space(write_yaml(GOOD), TABLE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(30):
        trial = study.ask()
        try:
            config = space.sample(trial)
        except ConfigError:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        assert space.from_params(config.params) == config
        study.tell(trial, 1.0)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_space(tmp_path / "nope.yaml")
