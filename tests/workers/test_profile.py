"""Profiling a server's decode: the simulated engine's profiler endpoints, the trace reader, and a
trial that asks for a profile, over real HTTP."""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from core.errors import BenchmarkError
from core.flags import FlagTable
from core.types import BenchConfig, Config, EngineSpec, GateConfig, KernelShare, TrialSpec
from tests.conftest import start_sim
from workers.profile import profile_decode, read_trace
from workers.trial import TrialRunner

BENCH = BenchConfig(concurrency=16, input_len=16, output_len=32, warmup_s=0.2, duration_s=0.6)


@pytest.fixture
def fallback_scenario(tmp_path: Path) -> Path:
    """A scenario where one setting sends most of the decode step to a fallback kernel."""
    path = tmp_path / "fallback.yaml"
    path.write_text(
        "name: fallback\ntime_scale: 50\nbase: {tok_s_c16: 800, ttft_ms: 50, startup_s: 20}\nnoise: {cv: 0}\n"
        "effects:\n  - match: {moe_runner_backend: triton}\n    tok_s: 0.5\n"
        "    kernels: {fused_moe_fallback_kernel: 1.7}\n")
    return path


def test_read_trace_ranks_kernels_by_summed_time(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "kernel", "name": n, "dur": d} for n, d in
              [("a", 10), ("b", 30), ("a", 20), ("c", 40)]]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 1000}, {"ph": "i", "cat": "kernel"}]
    path = tmp_path / "1-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    profile = read_trace(path, steps=3, top=2)
    assert profile.total_us == 100 and profile.kernel_count == 3 and profile.steps == 3
    assert [(k.name, k.share, k.calls) for k in profile.kernels] == [("c", 0.4, 1), ("a", 0.3, 2)]
    empty = tmp_path / "2-TP-0.trace.json"
    empty.write_text(json.dumps({"traceEvents": events[4:]}))
    with pytest.raises(ValueError, match="no GPU kernel events"):
        read_trace(empty)


def test_the_simulated_profiler_behaves_like_sglangs(fallback_scenario: Path, tmp_path: Path) -> None:
    server = start_sim(fallback_scenario, {"model_path": "/m", "moe_runner_backend": "triton"}, tmp_path)
    try:
        assert httpx.post(f"{server.url}/stop_profile", timeout=5).status_code == 500  # nothing to stop
        profile = asyncio.run(profile_decode(server.url, BENCH, tmp_path / "prof", steps=8, timeout_s=20))
        assert httpx.post(f"{server.url}/stop_profile", timeout=5).status_code == 500  # it stopped by itself
    finally:
        server.stop()
    assert Path(profile.trace_path).parent == tmp_path / "prof" and profile.trace_path.endswith("-TP-0.trace.json.gz")
    top = profile.kernels[0]
    assert top.name == "fused_moe_fallback_kernel"
    assert top.share == pytest.approx(1.7 / 2.7, abs=0.01)
    assert top.calls >= 8 and abs(sum(k.share for k in profile.kernels) - 1) < 1e-9


def test_a_server_without_a_profiler_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    class NoProfiler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"Not Found")

        def log_message(self, *args: object) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), NoProfiler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        with pytest.raises(BenchmarkError, match="start_profile answered 404: Not Found"):
            asyncio.run(profile_decode(f"http://127.0.0.1:{http.server_port}", BENCH, tmp_path, steps=2, timeout_s=1))
    finally:
        http.shutdown()


def test_a_trial_asked_to_profile_brings_its_kernels_back(fallback_scenario: Path, tmp_path: Path) -> None:
    flags = {"model_path": "/m", "moe_runner_backend": "triton"}
    spec = TrialSpec(trial_number=7, config=Config(params={}, flags=flags),
                     engine=EngineSpec(kind="sim", python=sys.executable, scenario=str(fallback_scenario)),
                     bench=BENCH, gate=GateConfig(prompts=()), startup_timeout_s=20, log_dir=str(tmp_path),
                     profile_steps=6)
    phases: list[str] = []
    result = TrialRunner(FlagTable.bundled(), "node", ("0",)).run(spec, on_phase=phases.append)
    assert result.ok and result.profile is not None and not result.profile_error
    assert phases[-2:] == ["profiling", "stopping"]
    assert result.profile.kernels[0].name == "fused_moe_fallback_kernel"
    assert Path(result.profile.trace_path).is_relative_to(tmp_path / "trial-0007-profile")


@pytest.mark.parametrize(("name", "short"), [  # kernel names from the real H200 trace (docs/real-gpu.md)
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, unsigned int)",
     "flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>"),
    ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long>(at::cuda::TensorInfo, int)",
     "at::native::(anonymous namespace)::indexSelectSmallIndex<..."),
    ("nvjet_sm90_tst_64x8_64x16_4x2_h_bz_TNT", "nvjet_sm90_tst_64x8_64x16_4x2_h_bz_TNT"),
])
def test_kernel_names_are_shown_without_their_signature(name: str, short: str) -> None:
    assert KernelShare(name, 0.1, 1.0, 1).short_name() == short
