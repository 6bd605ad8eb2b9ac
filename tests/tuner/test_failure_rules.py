"""Failure rules learned from a sweep's own launches (tuner.failure_rules), on a real space file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tuner.failure_rules import Learner, Observation
from tuner.space_loader import load_space


def space_yaml(name: str, params: str, gpus: int = 8, model_path: str = "/m") -> str:
    """A space file of ``params`` (their YAML lines) on ``gpus`` GPUs, tensor-parallel over all of them."""
    return (f"name: {name}\nengine: sglang\ngpus_per_trial: {gpus}\n"
            f"base: {{model_path: {model_path}, tp_size: {gpus}}}\nparams:\n{params}")


SPACE = space_yaml("rules", """\
  moe_a2a_backend: {choices: [none, deepep]}
  ep_size: {choices: [1, 2, 4, 8]}
  attention_backend: {choices: [fa3, flashinfer, triton]}
  cuda_graph_max_bs: {choices: [32, 64, 256]}
""")
DEEPEP = "server exited with code 1 during startup: AssertionError: DeepEP requires ep_size == tp_size (8)"
OOM = "server exited with code 137 during startup: torch.OutOfMemoryError: CUDA out of memory"


def learner(write_yaml: Any) -> Learner:
    return Learner(load_space(write_yaml(SPACE)))


def ok(n: int, **params: Any) -> Observation:
    return Observation(n, params)


def failed(n: int, kind: str, reason: str, **params: Any) -> Observation:
    return Observation(n, params, kind, reason)


def test_a_log_that_names_settings_gives_a_rule_over_the_values_that_failed(write_yaml: Any) -> None:
    runs = [ok(1, moe_a2a_backend="deepep", ep_size=8, attention_backend="fa3", cuda_graph_max_bs=32),
            ok(2, moe_a2a_backend="none", ep_size=4, attention_backend="fa3", cuda_graph_max_bs=32),
            ok(3, moe_a2a_backend="none", ep_size=2, attention_backend="triton", cuda_graph_max_bs=64),
            ok(4, moe_a2a_backend="none", ep_size=1, attention_backend="flashinfer", cuda_graph_max_bs=64)]
    fails = [failed(5, "config_error", DEEPEP, moe_a2a_backend="deepep", ep_size=4, attention_backend="fa3",
                    cuda_graph_max_bs=32),
             failed(9, "config_error", DEEPEP, moe_a2a_backend="deepep", ep_size=2, attention_backend="triton",
                    cuda_graph_max_bs=64),
             failed(11, "config_error", DEEPEP, moe_a2a_backend="deepep", ep_size=1, attention_backend="fa3",
                    cuda_graph_max_bs=64)]
    lr = learner(write_yaml)
    [rule] = lr.learn(runs + fails)
    assert rule.describe(lr.domains) == ("ep_size != 8 with moe_a2a_backend=deepep -> config_error, "
                                         "from trials 5, 9, 11 (named by the log)")
    assert rule.confirmed
    assert rule.matches({"moe_a2a_backend": "deepep", "ep_size": 2, "attention_backend": "flashinfer"})
    assert not rule.matches({"moe_a2a_backend": "deepep", "ep_size": 8})


def test_a_log_that_states_the_value_it_needs_covers_the_other_values_at_once(write_yaml: Any) -> None:
    base = {"attention_backend": "fa3", "cuda_graph_max_bs": 32}
    runs = [ok(1, moe_a2a_backend="none", ep_size=1, **base),
            failed(2, "config_error", DEEPEP, moe_a2a_backend="deepep", ep_size=1, **base)]
    lr = learner(write_yaml)
    [rule] = lr.learn(runs)
    assert rule.describe(lr.domains) == ("ep_size != 8 with moe_a2a_backend=deepep -> config_error, "
                                         "from trial 2 (named by the log)"), "one failure at EP 1, EP 2 and 4 covered"
    assert rule.confirmed and rule.matches({"moe_a2a_backend": "deepep", "ep_size": 4, **base})
    negated = DEEPEP.replace("requires ep_size == tp_size (8)", "does not support ep_size 1 or 4")
    [rule] = lr.learn([runs[0], failed(2, "config_error", negated, moe_a2a_backend="deepep", ep_size=1, **base)])
    assert not rule.matches({"moe_a2a_backend": "deepep", "ep_size": 8, **base}), "a negated line states no need"
    assert not rule.matches({"moe_a2a_backend": "deepep", "ep_size": 2, **base})
    contradicted = [*runs, ok(3, moe_a2a_backend="deepep", ep_size=2, **base)]
    rules = lr.learn(contradicted)
    assert rules and not any(r.matches({"moe_a2a_backend": "deepep", "ep_size": 2, **base}) for r in rules), \
        "a success at a value the log did not name keeps the rule to the value that failed"


def test_one_setting_that_failed_once_is_only_suspected(write_yaml: Any) -> None:
    runs = [ok(1, moe_a2a_backend="none", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=32),
            ok(2, moe_a2a_backend="none", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=64),
            failed(3, "oom", OOM, moe_a2a_backend="none", ep_size=1, attention_backend="fa3",
                   cuda_graph_max_bs=256)]
    [rule] = learner(write_yaml).learn(runs)
    assert rule.params == (("cuda_graph_max_bs", (256,)),) and not rule.confirmed
    second = failed(4, "oom", OOM, moe_a2a_backend="deepep", ep_size=8,
                    attention_backend="triton", cuda_graph_max_bs=256)
    rules = learner(write_yaml).learn([*runs, second])
    [general] = [r for r in rules if not r.confirmed and r.trials == (3, 4)]
    assert general.params == (("cuda_graph_max_bs", (256,)),)
    [box] = [r for r in rules if r.confirmed]
    assert dict(box.params) == {"cuda_graph_max_bs": (256,), "ep_size": (1, 8), "attention_backend": ("fa3", "triton")
                                }, "only the corner the failures span is certain (both a2a values failed)"
    assert not box.matches({"cuda_graph_max_bs": 256, "ep_size": 4, "attention_backend": "fa3",
                            "moe_a2a_backend": "none"}), "ep_size 4 at bs 256 was never tried: not blocked"


def test_failures_at_every_value_of_a_setting_generalise_over_it(write_yaml: Any) -> None:
    base = dict(moe_a2a_backend="none", ep_size=1, cuda_graph_max_bs=256)
    runs = [ok(1, **{**base, "cuda_graph_max_bs": 32}, attention_backend="fa3"),
            ok(2, **{**base, "cuda_graph_max_bs": 64}, attention_backend="triton"),
            *(failed(3 + i, "oom", OOM, **base, attention_backend=a) for i, a in enumerate(["fa3", "flashinfer",
                                                                                          "triton"]))]
    [rule] = learner(write_yaml).learn(runs)
    assert rule.confirmed and rule.params == (("cuda_graph_max_bs", (256,)),) and rule.trials == (3, 4, 5)


def test_a_success_that_matches_a_rule_drops_it(write_yaml: Any) -> None:
    base = dict(moe_a2a_backend="none", ep_size=1, attention_backend="fa3")
    runs = [ok(1, cuda_graph_max_bs=32, **base), failed(2, "oom", OOM, cuda_graph_max_bs=256, **base),
            failed(3, "oom", OOM, cuda_graph_max_bs=256, **{**base, "attention_backend": "triton"})]
    assert learner(write_yaml).learn(runs)
    contradicted = [*runs, ok(4, cuda_graph_max_bs=256, **{**base, "attention_backend": "flashinfer"})]
    assert all(not r.confirmed for r in learner(write_yaml).learn(contradicted))


def test_ties_are_suspects_and_their_corner_a_rule(write_yaml: Any) -> None:
    runs = [ok(1, moe_a2a_backend="none", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=32),
            ok(2, moe_a2a_backend="deepep", ep_size=8, attention_backend="triton", cuda_graph_max_bs=32),
            failed(3, "crashed", "RuntimeError: CUDA error: an illegal memory access was encountered",
                   moe_a2a_backend="deepep", ep_size=8, attention_backend="fa3", cuda_graph_max_bs=32)]
    rules = learner(write_yaml).learn(runs)
    suspects = [r for r in rules if not r.confirmed]
    fa3 = ("attention_backend", ("fa3",))
    ep8, deepep = ("ep_size", (8,)), ("moe_a2a_backend", ("deepep",))
    assert {r.params for r in suspects} == {(fa3, ep8), (fa3, deepep), (fa3, ep8, deepep)}
    assert not any(r.confirmed for r in rules), "one unexplained failure confirms nothing"


def test_rules_survive_the_store(tmp_path: Path) -> None:
    from tuner.failure_rules import Rule

    rule = Rule(params=(("ep_size", (1, 2, 4)),), kind="config_error", signature="s", trials=(1, 2), named=True,
                confirmed=True)
    assert Rule.from_dict(rule.as_dict()) == rule


CHECKPOINTS = space_yaml("checkpoints", model_path="/m/K2-FP8", params="""\
  quant_format:
    choices:
      fp8: {model_path: /m/K2-FP8}
      nvfp4: {model_path: /m/K2-NVFP4}
      mxfp4: {model_path: /m/K2-MXFP4}
  moe_runner_backend: {choices: [auto, flashinfer_cutlass, flashinfer_trtllm]}
  attention_backend: {choices: [flashinfer, trtllm_mla]}
""")
TRTLLM = ("server exited with code 1 during startup: ValueError: flashinfer_trtllm MoE runner supports only "
          "the modelopt_fp4 quantization")


def test_a_log_naming_another_checkpoint_format_puts_the_checkpoint_in_the_rule(write_yaml: Any) -> None:
    # SGLang's words: "modelopt_fp4" is the NVFP4 checkpoint; "flashinfer_trtllm" names the runner, not
    # the flashinfer attention backend
    lr = Learner(load_space(write_yaml(CHECKPOINTS)))
    runs = [ok(1, quant_format="fp8", moe_runner_backend="auto", attention_backend="flashinfer"),
            ok(2, quant_format="mxfp4", moe_runner_backend="auto", attention_backend="flashinfer"),
            failed(3, "config_error", TRTLLM, quant_format="mxfp4", moe_runner_backend="flashinfer_trtllm",
                   attention_backend="flashinfer"),
            failed(4, "config_error", TRTLLM, quant_format="fp8", moe_runner_backend="flashinfer_trtllm",
                   attention_backend="flashinfer")]
    assert lr.named_pairs(runs[2]) == [("moe_runner_backend", "flashinfer_trtllm"), ("quant_format", "mxfp4")]
    [rule] = lr.learn(runs)
    assert rule.describe(lr.domains) == ("moe_runner_backend=flashinfer_trtllm with quant_format != nvfp4 -> "
                                         "config_error, from trials 3, 4 (named by the log)")
    assert rule.matches({"quant_format": "mxfp4", "moe_runner_backend": "flashinfer_trtllm"})
    assert not rule.matches({"quant_format": "nvfp4", "moe_runner_backend": "flashinfer_trtllm"})


def test_a_log_stating_the_checkpoint_format_it_needs_covers_the_other_formats_at_once(write_yaml: Any) -> None:
    # "the modelopt_fp4 quantization": SGLang calls the checkpoint's format its quantization, so the line
    # states the one format the runner takes; a second launch with the third format is not needed
    lr = Learner(load_space(write_yaml(CHECKPOINTS)))
    runs = [ok(1, quant_format="fp8", moe_runner_backend="auto", attention_backend="flashinfer"),
            ok(2, quant_format="mxfp4", moe_runner_backend="auto", attention_backend="flashinfer"),
            failed(3, "config_error", TRTLLM, quant_format="fp8", moe_runner_backend="flashinfer_trtllm",
                   attention_backend="flashinfer")]
    assert lr.stated_values("quant_format", "fp8", TRTLLM) == {"nvfp4"}
    [rule] = lr.learn(runs)
    assert rule.describe(lr.domains) == ("moe_runner_backend=flashinfer_trtllm with quant_format != nvfp4 -> "
                                         "config_error, from trial 3 (named by the log)")
    assert rule.confirmed
    assert rule.matches({"quant_format": "mxfp4", "moe_runner_backend": "flashinfer_trtllm", "attention_backend": "x"})


KV_CACHE = space_yaml("kv", gpus=4, params="""\
  attention_backend: {choices: [flashinfer, fa3, triton]}
  kv_cache_dtype: {choices: [auto, fp8_e4m3, fp8_e5m2]}
  cuda_graph_max_bs: {choices: [32, 64]}
""")
FA3_KV = ("server exited with code 1 during startup: AssertionError: FlashAttention v3 backend supports "
          "kv_cache_dtype fp8_e4m3 or auto, got fp8_e5m2")


def test_a_log_naming_the_backend_in_words_puts_the_backend_in_the_rule(write_yaml: Any) -> None:
    # SGLang's words: "FlashAttention v3 Backend" is --attention-backend fa3
    lr = Learner(load_space(write_yaml(KV_CACHE)))
    runs = [ok(1, attention_backend="fa3", kv_cache_dtype="fp8_e4m3", cuda_graph_max_bs=32),
            ok(2, attention_backend="triton", kv_cache_dtype="fp8_e5m2", cuda_graph_max_bs=32),
            failed(3, "config_error", FA3_KV, attention_backend="fa3", kv_cache_dtype="fp8_e5m2", cuda_graph_max_bs=64)]
    assert lr.named_pairs(runs[2]) == [("attention_backend", "fa3"), ("kv_cache_dtype", "fp8_e5m2")]
    [rule] = lr.learn(runs)
    assert rule.describe(lr.domains) == ("attention_backend=fa3 with kv_cache_dtype=fp8_e5m2 -> config_error, "
                                         "from trial 3 (named by the log)")
    assert rule.confirmed, "two settings the log names: stopped before a second launch"
    assert not rule.matches({"attention_backend": "flashinfer", "kv_cache_dtype": "fp8_e5m2", "cuda_graph_max_bs": 64})
    gate = ("server exited with code 1 during startup: AssertionError: FlashAttention v3 Backend requires SM>=80 "
            "and SM<=90")
    assert lr.named_pairs(failed(4, "unsupported", gate, attention_backend="fa3", kv_cache_dtype="auto",
                                 cuda_graph_max_bs=32)) == [("attention_backend", "fa3")]


RUNNERS = space_yaml("runners", """\
  moe_runner_backend: {choices: [auto, cutlass]}
  ep_size: {choices: [1, 2, 4, 8]}
  attention_backend: {choices: [fa3, triton]}
  cuda_graph_max_bs: {choices: [32, 64]}
""")
CUTLASS_EP = ("server exited with code 1 during startup: AssertionError: cutlass fp8 MoE does not support "
              "expert parallelism")


def test_a_log_naming_expert_parallelism_in_words_puts_every_ep_size_above_1_in_the_rule(write_yaml: Any) -> None:
    # SGLang's words: "expert parallel" is --ep-size (its long option --expert-parallel-size), and
    # "does not support expert parallelism" is about any EP size above 1, not only the one that failed
    lr = Learner(load_space(write_yaml(RUNNERS)))
    runs = [ok(1, moe_runner_backend="cutlass", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=32),
            ok(2, moe_runner_backend="auto", ep_size=8, attention_backend="triton", cuda_graph_max_bs=32),
            failed(3, "config_error", CUTLASS_EP, moe_runner_backend="cutlass", ep_size=2, attention_backend="triton",
                   cuda_graph_max_bs=64)]
    assert lr.named_pairs(runs[2]) == [("ep_size", 2), ("moe_runner_backend", "cutlass")]
    [rule] = lr.learn(runs)
    assert rule.describe(lr.domains) == ("ep_size != 1 with moe_runner_backend=cutlass -> config_error, "
                                         "from trial 3 (named by the log)")
    assert rule.confirmed, "two settings the log names: stopped before a second launch"
    rest = {"attention_backend": "fa3", "cuda_graph_max_bs": 32}
    assert rule.matches({"moe_runner_backend": "cutlass", "ep_size": 8, **rest})
    assert not rule.matches({"moe_runner_backend": "cutlass", "ep_size": 1, **rest})
    sized = failed(3, "config_error", "AssertionError: cutlass needs expert parallel size 8",
                   moe_runner_backend="cutlass", ep_size=2, attention_backend="triton", cuda_graph_max_bs=64)
    [rule] = lr.learn([*runs[:2], sized])
    assert not rule.matches({"moe_runner_backend": "cutlass", "ep_size": 4, **rest}), "a size named, not the feature"


DRAFTS = space_yaml("drafts", """\
  attention_backend: {choices: [fa3, flashmla]}
  speculative_eagle_topk: {choices: [1, 2]}
  cuda_graph_max_bs: {choices: [32, 64]}
""")


def test_a_log_saying_topk_puts_the_draft_width_in_the_rule(write_yaml: Any) -> None:
    # SGLang's checks call --speculative-eagle-topk "topk" ("trtllm_mha backend only supports topk = 1")
    lr = Learner(load_space(write_yaml(DRAFTS)))
    runs = [ok(1, attention_backend="flashmla", speculative_eagle_topk=1, cuda_graph_max_bs=32),
            ok(2, attention_backend="fa3", speculative_eagle_topk=2, cuda_graph_max_bs=32),
            failed(3, "crashed", "RuntimeError: flashmla decode does not support topk > 1 draft trees",
                   attention_backend="flashmla", speculative_eagle_topk=2, cuda_graph_max_bs=64)]
    assert lr.named_pairs(runs[2]) == [("attention_backend", "flashmla"), ("speculative_eagle_topk", 2)]
    [rule] = lr.learn(runs)
    assert rule.confirmed, "two settings the log names: not a guess between topk and the CUDA-graph size"
    assert rule.matches({"attention_backend": "flashmla", "speculative_eagle_topk": 2, "cuda_graph_max_bs": 32})
    assert not rule.matches({"attention_backend": "flashmla", "speculative_eagle_topk": 1, "cuda_graph_max_bs": 64})


CAPTURE_OOM = ("server exited with code 137 during startup: Exception: Capture cuda graph failed: CUDA out of memory. "
               "Possible solutions: lower --mem-fraction-static, lower --cuda-graph-max-bs-decode")


def test_a_log_naming_an_option_by_its_name_in_another_sglang_version_names_the_setting(write_yaml: Any) -> None:
    # SGLang 0.5.23 renamed --cuda-graph-max-bs to --cuda-graph-max-bs-decode; the space's setting is
    # the same option under either name
    lr = learner(write_yaml)
    runs = [ok(1, moe_a2a_backend="deepep", ep_size=8, attention_backend="fa3", cuda_graph_max_bs=32),
            ok(2, moe_a2a_backend="none", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=256),
            ok(3, moe_a2a_backend="none", ep_size=8, attention_backend="triton", cuda_graph_max_bs=256),
            failed(4, "crashed", CAPTURE_OOM, moe_a2a_backend="deepep", ep_size=8, attention_backend="fa3",
                   cuda_graph_max_bs=256)]
    assert lr.named_pairs(runs[3]) == [("cuda_graph_max_bs", 256)]
    [rule] = lr.learn(runs)
    assert rule.describe(lr.domains) == ("cuda_graph_max_bs=256 with moe_a2a_backend=deepep -> crashed, "
                                         "from trial 4 (named by the log)")
    assert rule.confirmed


MOONCAKE = space_yaml("mooncake", """\
  moe_a2a_backend: {choices: [none, deepep, mooncake]}
  ep_size: {choices: [1, 2, 4, 8]}
  cuda_graph_max_bs: {choices: [32, 64]}
""")


def test_a_log_naming_a_parallelism_by_its_capitals_and_a_bound_covers_the_sizes_below_it(write_yaml: Any) -> None:
    # SGLang's docs and messages call expert parallelism "EP"; "DeepEP" and a rank tag "TP0 EP0" do not
    lr = Learner(load_space(write_yaml(MOONCAKE)))
    runs = [ok(1, moe_a2a_backend="mooncake", ep_size=8, cuda_graph_max_bs=32),
            ok(2, moe_a2a_backend="none", ep_size=1, cuda_graph_max_bs=64),
            failed(3, "config_error", "ValueError: mooncake EP needs at least 4 ranks",
                   moe_a2a_backend="mooncake", ep_size=1, cuda_graph_max_bs=64)]
    assert lr.named_pairs(runs[2]) == [("ep_size", 1), ("moe_a2a_backend", "mooncake")]
    [rule] = lr.learn(runs)
    assert rule.describe(lr.domains) == ("ep_size in {1, 2} with moe_a2a_backend=mooncake -> config_error, "
                                         "from trial 3 (named by the log)"), "at least 4: EP 2 fails as well"
    assert rule.confirmed, "two settings the log names: not a guess between EP and the CUDA-graph size"
    assert not rule.matches({"moe_a2a_backend": "mooncake", "ep_size": 4, "cuda_graph_max_bs": 64})
    assert lr.lower_bound("ep_size", 8, "ValueError: mooncake EP needs at least 4 ranks") is None, "8 is not below 4"
    assert lr.lower_bound("ep_size", 1, "ValueError: mooncake EP does not run on at least 4 ranks") is None
    tagged = failed(4, "crashed", "[TP0 EP0] RuntimeError: DeepEP dispatch timed out",
                    moe_a2a_backend="deepep", ep_size=8, cuda_graph_max_bs=64)
    assert lr.named_pairs(tagged) == [("moe_a2a_backend", "deepep")]


def test_a_bound_in_a_log_is_not_read_for_a_setting_with_a_range(write_yaml: Any) -> None:
    lr = Learner(load_space(write_yaml(space_yaml("ranged", "  mem_fraction_static: {float: [0.6, 0.9]}\n", gpus=1))))
    line = "the KV cache needs at least 1 GiB at --mem-fraction-static"
    assert lr.lower_bound("mem_fraction_static", 0.7, line) is None, "no list of values to bound"


def test_doubt_is_shared_among_explanations_and_grows_with_the_failures(write_yaml: Any) -> None:
    from tuner.failure_rules import SUSPECT_ODDS
    from tuner.rule_book import RuleBook

    tie = [ok(1, moe_a2a_backend="none", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=32),
           ok(2, moe_a2a_backend="deepep", ep_size=8, attention_backend="triton", cuda_graph_max_bs=32),
           failed(3, "crashed", "RuntimeError: CUDA error: an illegal memory access was encountered",
                  moe_a2a_backend="deepep", ep_size=8, attention_backend="fa3", cuda_graph_max_bs=32)]
    book = RuleBook(load_space(write_yaml(SPACE)))
    book.learn(tie)  # suspects: fa3 with ep 8, fa3 with deepep, and all three
    rest = {"cuda_graph_max_bs": 32}
    failing = {"moe_a2a_backend": "deepep", "ep_size": 8, "attention_backend": "fa3", **rest}
    assert book.feasibility(failing) == SUSPECT_ODDS
    one_of_three = book.feasibility({"moe_a2a_backend": "none", "ep_size": 8, "attention_backend": "fa3", **rest})
    assert 1 - (1 - SUSPECT_ODDS) / 3 <= one_of_three < 1, "one explanation of three: not doubted as if certain"
    assert book.feasibility({"moe_a2a_backend": "deepep", "ep_size": 8, "attention_backend": "triton", **rest}) == 1.0

    base = dict(moe_a2a_backend="none", ep_size=1, attention_backend="fa3")
    oom = [ok(1, cuda_graph_max_bs=32, **base), failed(2, "oom", OOM, cuda_graph_max_bs=256, **base)]
    candidate = {**base, "cuda_graph_max_bs": 256}
    book.learn(oom)
    once = book.feasibility(candidate)
    book.learn([*oom, failed(3, "oom", OOM, cuda_graph_max_bs=256,
                             **{**base, "moe_a2a_backend": "deepep", "ep_size": 8})])
    assert once == SUSPECT_ODDS, "the failing configuration itself: one failure's doubt, undiluted"
    assert book.feasibility(candidate) < once, "a second failure at cuda_graph_max_bs=256 doubts it more"


def test_a_crash_doubts_a_candidate_less_the_more_of_the_rest_of_its_configuration_it_changed(
        write_yaml: Any) -> None:
    from tuner.failure_rules import SUSPECT_ODDS
    from tuner.rule_book import RuleBook

    # FP8 KV crashed on flashinfer (it does not on fa3): by contrast with the successes, FP8 KV alone is
    # the smallest cause, but FP8 KV with flashinfer explains the crash as well
    book = RuleBook(load_space(write_yaml(KV_CACHE)))
    book.learn([ok(1, attention_backend="flashinfer", kv_cache_dtype="auto", cuda_graph_max_bs=32),
                ok(2, attention_backend="fa3", kv_cache_dtype="auto", cuda_graph_max_bs=32),
                failed(3, "crashed", "RuntimeError: CUDA error: no kernel image is available for execution on "
                       "the device", attention_backend="flashinfer", kv_cache_dtype="fp8_e4m3", cuda_graph_max_bs=32)])
    [rule] = book.rules
    assert rule.params == (("kv_cache_dtype", ("fp8_e4m3",)),) and not rule.confirmed
    fp8 = {"kv_cache_dtype": "fp8_e4m3"}
    kept_all = book.feasibility({"attention_backend": "flashinfer", "cuda_graph_max_bs": 32, **fp8})
    on_fa3 = book.feasibility({"attention_backend": "fa3", "cuda_graph_max_bs": 32, **fp8})
    changed_all = book.feasibility({"attention_backend": "fa3", "cuda_graph_max_bs": 64, **fp8})
    assert kept_all == SUSPECT_ODDS
    assert kept_all < on_fa3 < changed_all < 1.0, "the cause may be FP8 KV with a setting the candidate changed"
    assert book.feasibility({"attention_backend": "fa3", "kv_cache_dtype": "auto", "cuda_graph_max_bs": 64}) == 1.0


def test_judging_a_whole_space_at_once_answers_as_each_configuration_alone(write_yaml: Any) -> None:
    from tuner.encoding import Encoding
    from tuner.rule_book import RuleBook

    space = load_space(write_yaml(SPACE))
    runs = [ok(1, moe_a2a_backend="none", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=32),
            ok(2, moe_a2a_backend="deepep", ep_size=8, attention_backend="triton", cuda_graph_max_bs=32),
            failed(3, "crashed", "RuntimeError: CUDA error: an illegal memory access was encountered",
                   moe_a2a_backend="deepep", ep_size=8, attention_backend="fa3", cuda_graph_max_bs=32),
            failed(4, "oom", OOM, moe_a2a_backend="none", ep_size=1, attention_backend="fa3", cuda_graph_max_bs=256),
            failed(5, "config_error", DEEPEP, moe_a2a_backend="deepep", ep_size=2, attention_backend="triton",
                   cuda_graph_max_bs=64)]
    book = RuleBook(space)
    book.learn(runs)
    assert any(r.confirmed for r in book.rules) and any(not r.confirmed for r in book.rules)
    configs = list(space.iter_configs())
    enc = Encoding(space)
    blocked, weight = book.judge(enc, np.array([enc.encode(p) for p in configs]))
    assert blocked.tolist() == [book.blocks(p) for p in configs]
    assert weight.tolist() == [book.feasibility(p) for p in configs]
    assert len(set(weight.tolist())) > 2, "the space holds configurations doubted to different degrees"


CRASH = "server exited with code 137 during startup: RuntimeError: CUDA error: an illegal memory access was encountered"
THREE_A2A = space_yaml("crashes", """\
  moe_a2a_backend: {choices: [none, deepep, mooncake]}
  ep_size: {choices: [1, 2, 4, 8]}
  attention_backend: {choices: [fa3, flashinfer, triton]}
  cuda_graph_max_bs: {choices: [32, 64, 256]}
""")


def _at(ep: int, attention: str, a2a: str = "none", bs: int = 32) -> dict[str, Any]:
    return {"moe_a2a_backend": a2a, "ep_size": ep, "attention_backend": attention, "cuda_graph_max_bs": bs}


def test_crashes_that_all_kept_another_setting_do_not_confirm_the_cause_without_it(write_yaml: Any) -> None:
    from tuner.rule_book import RuleBook

    # three crashes at EP 2 around two leaders, all three on flashinfer (and no other setting's every
    # value among them): EP 2 alone is the smallest cause, but EP 2 with flashinfer explains them as
    # well, so EP 2 on fa3 is doubted, not ruled out
    runs = [ok(1, **_at(1, "flashinfer")), ok(2, **_at(4, "fa3", bs=64))]
    book = RuleBook(load_space(write_yaml(THREE_A2A)))
    book.learn(runs + [failed(n, "crashed", CRASH, **_at(2, "flashinfer", a2a, bs))
                       for n, a2a, bs in ((3, "none", 32), (4, "none", 64), (5, "deepep", 32))])
    assert not book.blocks(_at(2, "fa3"))
    assert book.blocks(_at(2, "flashinfer", bs=64)), "what all three had is ruled out"
    assert 0.0 < book.feasibility(_at(2, "fa3")) < 0.5, "still doubted: EP 2 alone is the likelier cause"
    # three crashes with nothing else in common: EP 2 is the cause
    apart = RuleBook(load_space(write_yaml(THREE_A2A)))
    apart.learn(runs + [failed(n, "crashed", CRASH, **_at(2, attention, a2a, bs))
                        for n, attention, a2a, bs in ((3, "flashinfer", "none", 32), (4, "fa3", "deepep", 64),
                                                      (5, "flashinfer", "mooncake", 256))])
    assert apart.blocks(_at(2, "triton", "deepep"))


def test_a_second_crash_in_another_context_makes_the_setting_alone_the_likelier_cause(write_yaml: Any) -> None:
    from tuner.failure_rules import SUSPECT_ODDS
    from tuner.rule_book import CAUSE_ALONE, RuleBook

    book = RuleBook(load_space(write_yaml(THREE_A2A)))
    runs = [ok(1, **_at(1, "fa3")), ok(2, **_at(4, "triton", bs=64)), failed(3, "crashed", CRASH, **_at(2, "fa3"))]
    candidate = _at(2, "flashinfer", "deepep", 256)
    book.learn(runs)
    once = book.feasibility(candidate)
    book.learn([*runs, failed(4, "crashed", CRASH, **_at(2, "triton", bs=64))])
    twice = book.feasibility(candidate)
    assert 0.0 < twice < once < 1.0
    # the candidate shares nothing with either crash: only EP 2 alone explains its failing, and after
    # crashes in two contexts that is likelier than it was before any (CAUSE_ALONE)
    assert 1 - twice > (1 - SUSPECT_ODDS ** 2) * CAUSE_ALONE


# EP 2 ran (on fa3), flashinfer ran (at EP 1), each with what else the crashes below have
EACH_HALF_RAN = [ok(1, **_at(2, "fa3")), ok(2, **_at(1, "flashinfer")), ok(3, **_at(1, "flashinfer", "deepep", 64)),
                 ok(4, **_at(2, "fa3", "deepep", 64))]


def test_two_crashes_of_two_settings_that_each_ran_without_the_other_confirm_the_pair(write_yaml: Any) -> None:
    from tuner.rule_book import RuleBook

    # crashes at EP 2 on flashinfer, in two contexts, are the pair
    runs = [*EACH_HALF_RAN, failed(5, "crashed", CRASH, **_at(2, "flashinfer")),
            failed(6, "crashed", CRASH, **_at(2, "flashinfer", "deepep", 64))]
    book = RuleBook(load_space(write_yaml(THREE_A2A)))
    book.learn(runs[:5])
    assert not book.blocks(_at(2, "flashinfer", "mooncake", 256)), "one crash: only suspected"
    book.learn(runs)
    assert book.blocks(_at(2, "flashinfer", "mooncake", 256))
    assert not book.blocks(_at(2, "triton")) and not book.blocks(_at(4, "flashinfer"))
    # one setting that crashed twice, both times with flashinfer, is not confirmed without it
    alone = RuleBook(load_space(write_yaml(THREE_A2A)))
    alone.learn([ok(1, **_at(1, "flashinfer")), failed(2, "crashed", CRASH, **_at(2, "flashinfer")),
                 failed(3, "crashed", CRASH, **_at(2, "flashinfer", "deepep", 64))])
    assert not alone.blocks(_at(2, "fa3", "mooncake", 256))


def test_a_crash_of_two_settings_that_each_ran_without_the_other_is_likelier_the_pair_alone(write_yaml: Any) -> None:
    from tuner.failure_rules import SUSPECT_ODDS
    from tuner.rule_book import CAUSE_ALONE_INTERACTION, RuleBook

    # with one more setting it would be three failing together: a candidate with the pair and nothing
    # else the crash had is doubted nearly as much as the crash itself
    book = RuleBook(load_space(write_yaml(THREE_A2A)))
    book.learn([*EACH_HALF_RAN, failed(5, "crashed", CRASH, **_at(2, "flashinfer"))])
    assert 1 - book.feasibility(_at(2, "flashinfer", "mooncake", 256)) >= (1 - SUSPECT_ODDS) * CAUSE_ALONE_INTERACTION
    assert book.feasibility(_at(2, "fa3", "mooncake", 256)) == 1.0
