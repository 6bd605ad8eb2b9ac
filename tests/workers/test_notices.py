"""SGLang's warnings and auto-adjustments found in server logs, each with its fix: lines as SGLang prints
them, no false alarm on real logs from an H200, and the simulated server printing a scenario's lines."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import start_sim
from workers.notices import CATALOGUE, notices_in

REAL_LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "real-logs"
PRINTED = {  # one line per kind, as SGLang prints it (from SGLang's source and published logs)
    "untuned MoE kernel": "[2026-02-04 11:30:00] Using default MoE kernel config. Performance might be "
                          "sub-optimal! Config file not found at .../E=60,N=1408,device_name=NVIDIA_H100.json",
    "CUDA graphs off": "[2026-11-30 10:00:00] Cuda graph is disabled because deepep_mode=`normal`",
    "decode without CUDA graph": "[2026-11-30 21:28:06] Decode batch, #running-req: 16, #token: 1265, token "
                                 "usage: 0.00, cuda graph: False, gen throughput (token/s): 2144.72, #queue-req: 0",
    "max_running_requests capped": "WARNING: max_running_requests is set to 48 for speculative decoding",
    "EP size overridden": "The expert parallel size is adjusted from 1 to the tensor parallel size [8]",
    "draft tokens overridden": "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1",
    "attention backend replaced": "FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention "
                                  "backend to triton.",  # SGLang 0.5.17, H100
    "chunked prefill resized": "DP attention is enabled. chunked prefill size is adjusted from 8192 to 1024",
    "fallback kernel": "NVFP4 MoE on sm_90: falling back to the Marlin kernel",
    "deprecated option": "'--disable-cuda-graph' is deprecated and will be removed in a future release. Use "
                         "'--cuda-graph-backend-{decode,prefill}=disabled' instead.",  # SGLang 0.5.17, H200
}


def test_every_kind_is_found_in_the_line_sglang_prints() -> None:
    assert set(PRINTED) == {kind for kind, _, _ in CATALOGUE}
    for kind, line in PRINTED.items():
        (found,) = notices_in(f"loading ...\n{line}\nThe server is fired up and ready to roll!\n")
        assert (found.kind, found.line) == (kind, line) and found.fix
    coloured = notices_in(f"\x1b[1;33m{PRINTED['deprecated option']}\x1b[0m")  # as SGLang prints it
    assert [n.line for n in coloured] == [PRINTED["deprecated option"]]
    everything = notices_in("\n".join([*PRINTED.values(), *PRINTED.values()]))
    assert [n.kind for n in everything] == [kind for kind, _, _ in CATALOGUE]  # once per kind


SEEN_0517 = {  # lines SGLang 0.5.17 printed on an H100 (benchmarks/real_gpu/results/runs-as-h100-2026-12-07.txt)
    "CUDA graphs off": "Breakable CUDA graph is incompatible with unvalidated a2a backend; disabling prefill "
                       "CUDA graph.",
    "max_running_requests capped": "Max running requests is reset to 48 for speculative decoding. You can override "
                                   "this by explicitly setting --max-running-requests.",
    "draft tokens overridden": "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                               "speculative_eagle_topk == 1",
}


def test_the_lines_sglang_0517_printed_on_an_h100_are_found() -> None:
    for kind, line in SEEN_0517.items():
        assert [n.kind for n in notices_in(f"[2026-12-07 23:08:01] {line}")] == [kind], line


REAL_NOTICES = {"disable-cuda-graph-0517.log": ["CUDA graphs off", "deprecated option"]}  # --disable-cuda-graph


@pytest.mark.parametrize("log", sorted(p.name for p in REAL_LOGS.glob("*.log")))
def test_real_sglang_logs_give_their_notices_and_no_false_alarm(log: str) -> None:
    # e.g. "a full pool falls back to CPU transport" is not a fallback kernel
    found = notices_in((REAL_LOGS / log).read_text(errors="replace"))
    assert [n.kind for n in found] == REAL_NOTICES.get(log, [])


def test_the_simulated_server_prints_a_scenarios_warnings(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ntime_scale: 100\nbase: {tok_s_c16: 20.0, ttft_ms: 100, startup_s: 10}\n"
                        "effects:\n  - match: {moe_runner_backend: triton}\n"
                        f"    log: \"{PRINTED['untuned MoE kernel']}\"\n")
    server = start_sim(scenario, {"model_path": "/m", "moe_runner_backend": "triton"}, tmp_path)
    try:
        assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
        log = server.log_path.read_text()
    finally:
        server.stop()
    assert [n.kind for n in notices_in(log)] == ["untuned MoE kernel"]
