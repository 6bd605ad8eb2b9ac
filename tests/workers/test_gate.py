"""The correctness gate against the simulated engine and on constructed outputs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from core.types import GateConfig, GatePrompt
from tests.conftest import SCENARIOS, start_sim
from workers.gate import check_output, garbage_reason, run_gate

SEED = SCENARIOS / "deepseek-v4-flash-8x-rtx-pro-6000.yaml"
GATE = GateConfig(prompts=(GatePrompt(text="What is 17*23? Answer with the number only.", expect="391"),))


def test_gate_fails_marlin_on_mxfp4_and_passes_nvfp4_marlin(tmp_path: Path) -> None:
    bad = start_sim(SEED, {"model_path": "/models/DeepSeek-V4-Flash", "moe_runner_backend": "marlin"}, tmp_path)
    good = start_sim(SEED, {"model_path": "/models/DeepSeek-V4-Flash-NVFP4", "moe_runner_backend": "marlin"},
                     tmp_path)
    try:
        failed = asyncio.run(run_gate(bad.url, GATE))
        passed = asyncio.run(run_gate(good.url, GATE))
        default = asyncio.run(run_gate(bad.url, GateConfig()))  # no expectations: garbage still caught
    finally:
        bad.stop()
        good.stop()
    assert not failed.passed and "one token repeated" in failed.checks[0].reason
    assert failed.checks[0].got.startswith("!!!!")
    assert passed.passed and passed.checks[0].got == "391"
    assert not default.passed


def test_servers_without_tokenizer_are_checked_on_token_ids(tmp_path: Path) -> None:
    server = start_sim(SEED, {"model_path": "/models/DeepSeek-V4-Flash-NVFP4", "skip_tokenizer_init": True},
                       tmp_path)
    bad = start_sim(SEED, {"model_path": "/models/DeepSeek-V4-Flash", "moe_runner_backend": "marlin",
                           "skip_tokenizer_init": True}, tmp_path)
    try:
        ok = asyncio.run(run_gate(server.url, GATE, no_tokenizer=True))
        garbage = asyncio.run(run_gate(bad.url, GATE, no_tokenizer=True))
    finally:
        server.stop()
        bad.stop()
    assert ok.passed and ok.semantic_skipped
    assert not garbage.passed and "one token repeated" in garbage.checks[0].reason


def test_dummy_weights_skip_semantic_checks() -> None:
    prompt = GatePrompt(text="q", expect="391")
    assert check_output(prompt, "zq!x", [5, 9, 7], dummy_weights=True).ok
    assert not check_output(prompt, "", [], dummy_weights=True).ok
    assert not check_output(prompt, "zq!x", [5, 9, 7], dummy_weights=False).ok


def test_garbage_detection() -> None:
    assert garbage_reason("", []) == "empty output"
    assert garbage_reason("!!!!!!", [0] * 6) == "one token repeated 6 times"
    assert garbage_reason("ab\ufffdc", [1, 2, 3]) == "replacement characters in output"
    assert garbage_reason("391", [7]) is None
    assert not check_output(GatePrompt(text="q", expect_regex=r"^\d+$"), "three", [1, 2], False).ok


def test_unreachable_server_is_a_failed_gate_not_an_exception() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(503))
    result = asyncio.run(run_gate("http://x", GATE, transport=transport))
    assert not result.passed and "request failed" in result.checks[0].reason
