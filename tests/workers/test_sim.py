"""The simulated SGLang engine as a real subprocess over real HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from core.errors import ServerStartError, ServerTimeoutError
from tests.conftest import SCENARIOS, start_sim, wait_for
from workers.sim.args import build_parser, options_by_dest
from workers.sim.scenario import evaluate, load_scenario

FAST = SCENARIOS / "fast-test.yaml"
SEED = SCENARIOS / "deepseek-v4-flash-8x-rtx-pro-6000.yaml"

FAILING = """
name: failing
time_scale: 100
base: {tok_s_c16: 100.0, ttft_ms: 100, startup_s: 30}
failures:
  - {match: {moe_runner_backend: flashinfer_trtllm}, at: startup, exit_code: 137,
     log: "NotImplementedError: trtllm-gen MoE kernels require an SM100 GPU"}
  - {match: {speculative_algorithm: MTP}, at: startup, exit_code: 1,
     log: "ValueError: Unknown speculative algorithm name: MTP"}
  - {match: {cuda_graph_max_bs: 64}, at: startup, exit_code: 137,
     log: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}
  - {match: {moe_runner_backend: triton}, at: warmup, log: "RuntimeError: warmup request failed"}
  - {match: {moe_runner_backend: cutlass}, at: runtime, after_requests: 3,
     log: "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:3385, unhandled cuda error"}
  - {match: {moe_runner_backend: deep_gemm}, at: hang}
  - {match: {moe_runner_backend: marlin}, at: output}
responses:
  - {prompt: "17\\\\*23", text: "391"}
"""


@pytest.fixture
def failing(tmp_path: Path) -> Path:
    path = tmp_path / "failing.yaml"
    path.write_text(FAILING)
    return path


def test_readiness_sequence_and_log_lines(tmp_path: Path) -> None:
    slow_start = tmp_path / "slow.yaml"  # 6 s startup: the 503 warm-up phase lasts 0.6 s, easy to observe
    slow_start.write_text("name: slow\ntime_scale: 100\nbase: {tok_s_c16: 20, ttft_ms: 100, startup_s: 600}\n")
    server = start_sim(slow_start, {"model_path": "/models/DeepSeek-V4-Flash-NVFP4"}, tmp_path, wait=False)
    try:
        seen: dict[str, set[int]] = {"/ready": set(), "/health": set()}

        def probe() -> bool:
            for path, codes in seen.items():
                try:
                    codes.add(httpx.get(server.url + path, timeout=2).status_code)
                except httpx.ConnectError:
                    codes.add(0)
            return 200 in seen["/ready"] and 200 in seen["/health"]

        wait_for(probe, 30, "the simulated server to become ready")
        for path, codes in seen.items():  # port closed while loading, then 503 during warm-up, then 200
            assert codes == {0, 503, 200}, (path, codes)
        info = httpx.get(server.url + "/server_info").json()
        assert info["version"] == "0.5.23" and info["tp_size"] == 1
        assert httpx.get(server.url + "/get_server_info").status_code == 200
        assert httpx.get(server.url + "/model_info").json()["model_path"] == "/models/DeepSeek-V4-Flash-NVFP4"
        assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == "/models/DeepSeek-V4-Flash-NVFP4"
        log = server.read_log()
        order = ["Load weight begin", "Load weight end", "Capture cuda graph begin", "Capture cuda graph end",
                 "max_total_num_tokens=", "The server is fired up and ready to roll!"]
        positions = [log.index(marker) for marker in order]
        assert positions == sorted(positions)
    finally:
        server.stop()
    assert not server.alive()


def test_sse_framing_byte_for_byte(tmp_path: Path) -> None:
    with_spec = {"model_path": "/m", "speculative_algorithm": "EAGLE"}
    server = start_sim(FAST, with_spec, tmp_path)
    try:
        body = {"input_ids": list(range(10, 42)), "stream": True,
                "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
        raw = httpx.post(server.url + "/generate", json=body, timeout=30).content
        assert raw.endswith(b"data: [DONE]\n\n")
        frames = raw.split(b"\n\n")
        assert frames[-1] == b"" and frames[-2] == b"data: [DONE]"
        events = []
        for frame in frames[:-2]:
            assert frame.startswith(b"data: ") and b"\n" not in frame
            events.append(json.loads(frame[6:]))
        prev_text, prev_ids = "", []
        for ev in events:
            assert ev["text"].startswith(prev_text) and ev["output_ids"][: len(prev_ids)] == prev_ids
            assert ev["meta_info"]["completion_tokens"] == len(ev["output_ids"])
            assert ev["meta_info"]["prompt_tokens"] == 32
            prev_text, prev_ids = ev["text"], ev["output_ids"]
        last = events[-1]["meta_info"]
        assert last["completion_tokens"] == 200
        assert last["finish_reason"] == {"type": "length", "length": 200}
        assert "e2e_latency" in last and last["spec_verify_ct"] > 0
        assert all(ev["meta_info"]["finish_reason"] is None for ev in events[:-1])
        # speculative decoding: chunks carry several tokens; accept length reported like SGLang
        assert len(events) < 200 / 1.5
        assert 2.0 < last["spec_accept_length"] < 2.8
    finally:
        server.stop()


def test_api_key_is_required_as_sglang_requires_it(tmp_path: Path) -> None:
    server = start_sim(FAST, {"model_path": "/m", "api_key": "sk-test-key"}, tmp_path)  # ready: key was sent
    try:
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 4}}
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            denied = httpx.post(server.url + "/generate", json=body, headers=headers, timeout=10)
            assert (denied.status_code, denied.json()) == (401, {"error": "Unauthorized"})
        assert httpx.get(server.url + "/ready", timeout=10).status_code == 401
        ok = httpx.post(server.url + "/generate", json=body, headers={"Authorization": "Bearer sk-test-key"},
                        timeout=10)
        assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] == 4
    finally:
        server.stop()


def test_readiness_without_the_api_key_fails_fast_with_the_reason(tmp_path: Path) -> None:
    server = start_sim(FAST, {"model_path": "/m", "api_key": "sk-test-key"}, tmp_path, wait=False)
    server.headers = {}  # a client that was not told the key
    with pytest.raises(ServerStartError, match="HTTP 401: it wants an API key") as info:
        server.wait_ready(60)
    assert info.value.kind == "config_error" and not server.alive()


def test_openai_streams_with_usage(tmp_path: Path) -> None:
    server = start_sim(FAST, {"model_path": "/m"}, tmp_path)
    try:
        for path, extra in (("/v1/completions", {"prompt": "hello there", "max_tokens": 20}),
                            ("/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 20})):
            body = {**extra, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
            lines = [ln for ln in httpx.post(server.url + path, json=body, timeout=30).text.split("\n\n") if ln]
            assert lines[-1] == "data: [DONE]"
            usage_chunk = json.loads(lines[-2][6:])
            assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 20
            first = json.loads(lines[0][6:])
            key = "delta" if "chat" in path else "text"
            assert key in first["choices"][0]
        bad = httpx.post(server.url + "/generate", json={"sampling_params": {}})
        assert bad.status_code == 400 and "error" in bad.json()
    finally:
        server.stop()


@pytest.mark.parametrize(("flags", "kind", "line"), [
    ({"moe_runner_backend": "flashinfer_trtllm"}, "unsupported", "trtllm-gen MoE kernels require an SM100"),
    ({"speculative_algorithm": "EAGLE", "moe_runner_backend": "auto", "cuda_graph_max_bs": 64}, "oom",
     "torch.OutOfMemoryError"),
    ({"moe_runner_backend": "triton"}, "crashed", "Initialization failed. warmup error"),
])
def test_startup_failures_are_classified(flags: dict[str, object], kind: str, line: str,
                                         failing: Path, tmp_path: Path) -> None:
    server = start_sim(failing, {"model_path": "/m", **flags}, tmp_path, wait=False)
    with pytest.raises(ServerStartError) as info:
        server.wait_ready(30)
    assert info.value.kind == kind
    assert line in info.value.log_tail
    assert not server.alive()


def test_exit_codes_match_sglang(failing: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "workers.sim", "--sim-scenario", str(failing),
                               "--model-path", "/m", *args], capture_output=True, text=True, timeout=60)

    bad = run("--moe-runner-backend", "marlinn")
    assert bad.returncode == 2 and "invalid choice: 'marlinn'" in bad.stderr
    ambiguous = run("--cuda-graph-max-bs", "8")
    assert ambiguous.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in ambiguous.stderr
    config = run("--speculative-algorithm", "MTP")
    assert config.returncode == 1 and "Unknown speculative algorithm name: MTP" in config.stderr
    oom = run("--cuda-graph-max-bs-decode", "64")
    assert oom.returncode == -9 and "Received sigquit from a child process" in oom.stderr


def test_runtime_death_after_n_requests(failing: Path, tmp_path: Path) -> None:
    server = start_sim(failing, {"model_path": "/m", "moe_runner_backend": "cutlass"}, tmp_path)
    for _ in range(3):
        httpx.post(server.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 4}})
    wait_for(lambda: not server.alive(), 20, "the server to die")
    assert server.exit_code() == -9
    assert "NCCL error" in server.read_log()
    server.stop()


def test_hang_never_becomes_ready(failing: Path, tmp_path: Path) -> None:
    server = start_sim(failing, {"model_path": "/m", "moe_runner_backend": "deep_gemm"}, tmp_path, wait=False)
    with pytest.raises(ServerTimeoutError) as info:
        server.wait_ready(3)
    assert info.value.kind == "startup_timeout"
    assert not server.alive()


def test_garbage_output_and_answers(failing: Path, tmp_path: Path) -> None:
    healthy = start_sim(failing, {"model_path": "/m"}, tmp_path)
    broken = start_sim(failing, {"model_path": "/m", "moe_runner_backend": "marlin"}, tmp_path)
    try:
        body = {"text": "What is 17*23?", "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
        assert httpx.post(healthy.url + "/generate", json=body).json()["text"] == "391"
        garbage = httpx.post(broken.url + "/generate", json=body).json()
        assert set(garbage["output_ids"]) == {0} and len(garbage["output_ids"]) == 16
    finally:
        healthy.stop()
        broken.stop()


def _options(argv: list[str]) -> dict[str, object]:
    return options_by_dest(build_parser().parse_args(argv))


def test_seeded_noise_is_reproducible_and_shared_by_configurations_that_run_alike(tmp_path: Path) -> None:
    scenario = load_scenario(SEED)
    a = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4"]), {})
    b = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4"]), {})
    c = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4", "--ep-size", "2"]), {})
    assert a.noise_factor == b.noise_factor != 1.0
    assert c.noise_factor != a.noise_factor
    # No effect of the scenario names the schedule policy or the chunked-prefill size: such a configuration
    # runs what ``a`` runs, and real SGLang reads those alike (docs/real-gpu.md), so it shares a's deviation.
    alike = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4", "--schedule-policy",
                                         "lpm", "--chunked-prefill-size", "4096"]), {})
    assert alike.noise_factor == a.noise_factor
    assert evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4", "--ep-size", "2",
                                        "--schedule-policy", "lpm"]), {}).noise_factor == c.noise_factor
    graphs = {bs: evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4",
                                               "--cuda-graph-max-bs-decode", str(bs)]), {}).noise_factor
              for bs in (24, 32, 40)}
    assert graphs[24] == graphs[32] != graphs[40]  # 24 and 32 match the same effects; 40 only ">=24"
    reseeded = scenario.model_copy(update={"noise": scenario.noise.model_copy(update={"seed": 99})})
    assert evaluate(reseeded, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4"]), {}).noise_factor \
        != a.noise_factor
    server = start_sim(SEED, {"model_path": "/models/DeepSeek-V4-Flash-NVFP4"}, tmp_path)
    try:
        sim = httpx.get(server.url + "/server_info").json()["simulated"]
        assert sim["modelled_tok_s_c16"] == pytest.approx(a.tok_s_c16 * a.noise_factor)
    finally:
        server.stop()


def test_fa3_with_an_fp8_e5m2_kv_cache_runs_as_triton_as_sglang_resolves_it() -> None:
    # SGLang (0.5.17's arg_groups/overrides.py, _attention_backend_fa3_fp8_fallback; the reference for
    # 0.5.23) sets the attention backend to triton, warns, and /server_info reports triton.
    scenario = load_scenario(SCENARIOS / "llama-70b-4x-h100-kvcache.yaml")
    model = ["--model-path", "/models/Llama-3.1-70B-Instruct", "--kv-cache-dtype", "fp8_e5m2"]
    asked = evaluate(scenario, _options([*model, "--attention-backend", "fa3"]), {})
    run = evaluate(scenario, _options([*model, "--attention-backend", "triton"]), {})
    assert dict(asked.ran_as) == {"attention_backend": "triton"} and not run.ran_as
    assert "FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention backend to triton." in \
        " ".join(asked.notices)
    assert (asked.tok_s_c16, asked.noise_factor) == (run.tok_s_c16, run.noise_factor), "one server, one reading"
    e4m3 = evaluate(scenario, _options([*model[:2], "--kv-cache-dtype", "fp8_e4m3", "--attention-backend", "fa3"]), {})
    assert not e4m3.ran_as and e4m3.tok_s_c16 > asked.tok_s_c16


def test_seed_scenario_figures() -> None:
    scenario = load_scenario(SEED)

    def model(*argv: str) -> float:
        return evaluate(scenario, _options(["--model-path", *argv]), {}).tok_s_c16

    assert model("/models/DeepSeek-V4-Flash") == pytest.approx(23.0)
    assert model("/models/DeepSeek-V4-Flash-NVFP4", "--moe-runner-backend", "marlin") == pytest.approx(28.7, 0.01)
    nvfp4_marlin = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4",
                                                "--moe-runner-backend", "marlin"]), {})
    assert nvfp4_marlin.ttft_ms == pytest.approx(332, abs=2) and nvfp4_marlin.startup_s == pytest.approx(175)
    triton = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash-NVFP4",
                                          "--moe-runner-backend", "triton"]), {})
    assert triton.startup_s == pytest.approx(100)
    mxfp4_marlin = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash",
                                                "--moe-runner-backend", "marlin"]), {})
    assert mxfp4_marlin.failure is not None and mxfp4_marlin.failure.at == "output"
    ll = evaluate(scenario, _options(["--model-path", "/models/DeepSeek-V4-Flash"]), {"NCCL_PROTO": "LL"})
    assert ll.tok_s_c16 == pytest.approx(23.0)
    assert model("/models/DeepSeek-V4-Flash", "--ep-size", "4") < 23.0


async def _plain_closed_loop(url: str, concurrency: int, output_len: int, warmup_s: float,
                            window_s: float) -> float:
    """A minimal closed-loop client, independent of workers.bench: tokens whose event arrived in the window."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    lo, hi = start + warmup_s, start + warmup_s + window_s
    counted = 0

    async def stream(client: httpx.AsyncClient) -> None:
        nonlocal counted
        while loop.time() < hi:
            body = {"input_ids": [7] * 64, "stream": True,
                    "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True}}
            seen = 0
            async with client.stream("POST", "/generate", json=body) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        n = json.loads(line[6:])["meta_info"]["completion_tokens"]
                        if lo <= loop.time() < hi:
                            counted += n - seen
                        seen = n

    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 limits=httpx.Limits(max_connections=concurrency)) as client:
        tasks = [asyncio.create_task(stream(client)) for _ in range(concurrency)]
        await asyncio.sleep(hi - loop.time())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return counted / window_s


def test_plain_closed_loop_c16_measures_the_model_within_3_percent(tmp_path: Path) -> None:
    scenario_path = tmp_path / "steady.yaml"
    scenario_path.write_text("name: steady\ntime_scale: 20\nbase: {tok_s_c16: 30.0, ttft_ms: 300, "
                             "startup_s: 10}\nnoise: {cv: 0}\n")
    server = start_sim(scenario_path, {"model_path": "/m"}, tmp_path)
    try:
        measured = asyncio.run(_plain_closed_loop(server.url, 16, 256, 1.0, 5.0))
    finally:
        server.stop()
    scenario = load_scenario(scenario_path)
    outcome = evaluate(scenario, _options(["--model-path", "/m"]), {})
    expected = outcome.expected_tok_s(16, 256, scenario.saturation_c) * scenario.time_scale
    assert measured == pytest.approx(expected, rel=0.03)
