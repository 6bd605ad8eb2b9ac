"""Settings SGLang runs otherwise than asked, through the real sweep loop offline: a launch whose server
reports another value (``/server_info``) teaches a rule, a proposal the rule turns into a configuration
already measured is answered from it without a launch, and a failure is learned at the value it ran."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from core.flags import ran_otherwise
from core.types import RunStatus
from tests.conftest import start_sim
from tuner.live import SweepView
from tuner.results import SweepResults, load_results
from tuner.runs_as import RunsAsBook, learn
from tuner.space_loader import load_space
from tuner.study import Sweep
from tuner.study_db import open_study
from tuner.sweep_state import SweepOptions

ADJUSTED = "deepep MoE is enabled. The expert parallel size is adjusted from {ep_size} to the tensor parallel size [8]."
SCENARIO = f"""
name: runs-as
sglang_version: "0.5.23"
gpu: {{name: NVIDIA H200, arch: sm_90, count: 8, memory_gb: 141}}
time_scale: 50
base: {{tok_s_c16: 500.0, ttft_ms: 200, startup_s: 100}}
adjustments:
  - match: {{moe_a2a_backend: deepep, ep_size: "!=8"}}
    sets: {{ep_size: 8}}
    log: "{ADJUSTED}"
effects:
  - {{match: {{moe_a2a_backend: deepep}}, tok_s: 1.2}}
  - {{match: {{ep_size: 8}}, tok_s: 0.95}}
failures:
  - match: {{moe_runner_backend: cutlass, ep_size: ">1"}}
    at: startup
    exit_code: 1
    log: "AssertionError: FP8 Cutlass MoE is only supported with ep_size == 1"
"""
SPACE = """
name: runs-as
engine: sim
scenario: runs-as.yaml
gpus_per_trial: 8
startup_timeout_s: 30
base: {model_path: /m, tp_size: 8}
params:
  moe_a2a_backend: {choices: [none, deepep]}
  ep_size: {choices: [1, 2, 4, 8]}
  moe_runner_backend: {choices: [auto, cutlass]}
benchmark: {concurrency: 16, input_len: 32, output_len: 64, warmup_s: 0.3, duration_s: 1.0, request_timeout_s: 5}
"""
PLAIN = {"moe_a2a_backend": "none", "ep_size": 1, "moe_runner_backend": "auto"}


def _space(tmp_path: Path) -> Path:
    (tmp_path / "runs-as.yaml").write_text(SCENARIO)
    (tmp_path / "space.yaml").write_text(SPACE)
    return tmp_path / "space.yaml"


def _sweep(tmp_path: Path, budget: int, queued: list[dict[str, object]]) -> tuple[SweepResults, str]:
    study = open_study(tmp_path / "t.db", "runs-as")
    for params in queued:
        study.enqueue_trial(params)
    out = io.StringIO()
    opts = SweepOptions(space_path=str(_space(tmp_path)), db_path=str(tmp_path / "t.db"), budget=budget, seed=0,
                        study_name="runs-as", offline=True, max_groups=1, gpus=8)
    Sweep(opts, lambda n, b, s: SweepView(Console(file=out, width=240), n, b, s)).run()
    return load_results(tmp_path / "t.db", "runs-as"), out.getvalue()


def test_a_proposal_sglang_runs_as_a_measured_one_is_answered_from_it(tmp_path: Path) -> None:
    asked = {"moe_a2a_backend": "deepep", "ep_size": 1, "moe_runner_backend": "auto"}
    queued = [PLAIN, asked, *({**asked, "ep_size": ep} for ep in (2, 4, 8))]
    results, out = _sweep(tmp_path, 4, queued)
    runs = {r.params["ep_size"]: r for r in results.runs if r.params.get("moe_a2a_backend") == "deepep"}
    assert runs[1].status == "ok" and runs[1].ran_as == {"ep_size": 8}, "the server ran EP 8, and said so"
    assert "ep_size runs as 8 with ep_size=1, moe_a2a_backend=deepep, from trial 1 (the server's /server_info)" in out
    assert runs[2].status == "ok", "one value asked says nothing of another: EP 2 is launched"
    assert "ep_size runs as 8 with moe_a2a_backend=deepep, from trials 1, 2 (the server's /server_info)" in out
    for ep in (4, 8):  # EP 4 with DeepEP runs as EP 8; EP 8 asks for what trial 1 ran
        assert runs[ep].status == "cached" and runs[ep].cached_from == runs[1].trial_number, ep
        assert runs[ep].tok_s == runs[1].tok_s
    assert f"trial {runs[4].trial_number}: SGLang runs it as trial {runs[1].trial_number}" in out
    assert any(text.startswith("ep_size runs as 8 with moe_a2a_backend=deepep") for text in results.rules), \
        "kept in the store, shown"
    plain = next(r for r in results.runs if r.params == PLAIN)
    assert plain.status == "ok" and plain.ran_as is None, "ran as asked"
    assert len([r for r in results.runs if r.status.launched]) == 4, "answers from a run cost no budget"


def test_a_failure_is_learned_at_the_value_sglang_ran_it_with(tmp_path: Path) -> None:
    deepep = {"moe_a2a_backend": "deepep", "ep_size": 1, "moe_runner_backend": "auto"}
    cutlass = {**deepep, "moe_runner_backend": "cutlass"}  # asked EP 1, run at EP 8: "only ... ep_size == 1"
    results, _ = _sweep(tmp_path, 4, [PLAIN, deepep, cutlass, {**cutlass, "ep_size": 2}])
    failed = next(r for r in results.runs if r.params == cutlass)
    assert failed.status == "infeasible"
    assert any(text.startswith("ep_size != 1 with moe_runner_backend=cutlass") for text in results.rules), \
        "the line's own bound, read at the EP size the server ran"
    avoided = next(r for r in results.runs if r.params == {**cutlass, "ep_size": 2})
    assert avoided.status == "avoided", "the same failure is not paid for again"


def test_the_simulated_server_reports_the_settings_as_it_runs_them(tmp_path: Path) -> None:
    _space(tmp_path)
    flags = {"model_path": "/m", "tp_size": 8, "moe_a2a_backend": "deepep", "ep_size": 2}
    server = start_sim(tmp_path / "runs-as.yaml", flags, tmp_path)
    try:
        info = server.server_info()
        assert info["ep_size"] == 8 and info["moe_a2a_backend"] == "deepep"
        assert ran_otherwise(flags, info) == {"ep_size": 8}
        assert ADJUSTED.format(ep_size=2) in server.read_log()
    finally:
        server.stop()


def test_a_setting_counts_as_run_otherwise_only_where_no_spelling_of_it_says_what_was_asked() -> None:
    asked = {"cuda_graph_max_bs": 64, "mem_fraction_static": 0.85, "enable_torch_compile": True, "dtype": "auto"}
    # 0.5.17 keeps the deprecated alias beside the new name; a value read back as text or as a float is the same
    reported = {"cuda_graph_max_bs": None, "cuda_graph_max_bs_decode": 64, "mem_fraction_static": "0.85",
                "enable_torch_compile": "true", "dtype": "bfloat16"}
    assert ran_otherwise(asked, reported) == {"dtype": "bfloat16"}
    assert ran_otherwise(asked, {}) == {}, "an option the server does not report is not a difference"


def _run(number: int, ran_as: dict[str, object] | None = None, **flags: object) -> SimpleNamespace:
    return SimpleNamespace(trial_number=number, flags=flags, ran_as=ran_as, status=RunStatus.OK, repeat_of=None)


def test_a_rule_is_what_the_adjusted_launches_share_and_no_launch_run_as_asked_has() -> None:
    # topk 1 runs steps + 1 draft tokens: 4 steps ran as 5 whether 4 or 8 were asked; topk 4 runs as asked
    runs = [_run(0, None, steps=4, topk=4, draft=4), _run(1, None, steps=3, topk=1, draft=4),
            _run(2, {"draft": 5}, steps=4, topk=1, draft=4), _run(3, {"draft": 5}, steps=4, topk=1, draft=8)]
    [rule] = learn(runs)
    assert (rule.dest, rule.value, dict(rule.condition), rule.trials) == ("draft", 5, {"steps": 4, "topk": 1}, (2, 3))
    assert not rule.covers({"steps": 4, "topk": 4, "draft": 8}), "draft 8 alone is not what made it run as 5"
    assert not rule.covers({"steps": 4, "topk": 1, "draft": 5}), "asks for what it runs as: nothing to change"
    [alone] = learn(runs[:3])  # one launch: the asked value stays in the rule
    assert dict(alone.condition) == {"steps": 4, "topk": 1, "draft": 4}
    contradicted = [*runs, _run(4, None, steps=4, topk=1, draft=16)]  # ran as asked: not topk and steps alone
    assert all(dict(r.condition) != {"steps": 4, "topk": 1} for r in learn(contradicted))


def test_a_setting_run_otherwise_is_read_into_the_parameter_that_sets_it_grouped_ones_too() -> None:
    space = load_space(Path(__file__).parents[2] / "search_spaces" / "hard-llama-70b-h100.yaml")
    book = RunsAsBook.for_space(space)
    drafts = "speculative.eagle3.speculative_num_draft_tokens"
    params = {"attention_backend": "fa3", "kv_cache_dtype": "fp8_e5m2", "enable_torch_compile": False,
              "speculative": "eagle3", "speculative.eagle3.speculative_num_steps": 3,
              "speculative.eagle3.speculative_eagle_topk": 1, drafts: 8, "schedule_policy": "fcfs",
              "cuda_graph_max_bs": 32, "chunked_prefill_size": 4096}
    config = space.from_params(params)
    reported = {"speculative_num_draft_tokens": 4, "attention_backend": "triton"}
    ran = book.effective_params(params, config.flags, reported)
    assert ran == {**params, drafts: 4, "attention_backend": "triton"}
    # 5 draft tokens is no value of the parameter: what it stands for is unknown, so it stays as asked
    assert book.effective_params(params, config.flags, {"speculative_num_draft_tokens": 5}) == params
    assert RunsAsBook().effective_params(params, config.flags, {"speculative_num_draft_tokens": 4}) == params, \
        "without the space, only a parameter named as the option"


def test_a_rule_is_told_without_the_settings_no_parameter_changes(tmp_path: Path) -> None:
    # as on the real H100 (docs/real-gpu.md): one adjusted launch and no contrast, so the rule holds all it had
    space = load_space(_space(tmp_path))
    book = RunsAsBook.for_space(space)
    asked = {"moe_a2a_backend": "deepep", "ep_size": 1, "moe_runner_backend": "auto"}
    [rule] = book.refresh([_run(0, {"ep_size": 8}, **space.from_params(asked).flags)])
    assert {"model_path", "tp_size"} <= dict(rule.condition).keys(), "the rule still holds the base settings"
    told = book.describe(rule)
    assert "model_path" not in told and "tp_size" not in told
    assert "moe_a2a_backend=deepep" in told and "ep_size=1" in told
    assert "tp_size=8" in rule.describe(), "a book that knows no space leaves nothing out"
