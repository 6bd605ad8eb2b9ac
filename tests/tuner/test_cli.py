"""The command line as a user runs it: exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import FIXTURES, SCENARIOS, SPACES, start_sim

CLI = [sys.executable, "-m", "tuner.cli"]


def _run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": str(cwd or "/tmp"), **(env or {})})


def test_validate_prints_cardinality_of_every_bundled_space() -> None:
    for space in sorted(SPACES.glob("*.yaml")):
        proc = _run("validate", str(space))
        assert proc.returncode == 0, proc.stderr
        assert "configurations after" in proc.stdout


def test_validate_broken_file_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nparams:\n  moe_runner_backend: {choices: [auto, marlinn]}\n")
    proc = _run("validate", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {bad}: params.moe_runner_backend.choices[1]: 'marlinn' is not a --moe-runner-backend of "
        "SGLang 0.5.23 (did you mean 'marlin'?)"]
    assert proc.stdout == ""


def test_validate_reports_hardware_pruning() -> None:
    proc = _run("validate", str(SPACES / "deepseek-v4-flash-rtx-pro-6000.yaml"), "--gpu", "sm_120")
    assert proc.returncode == 0
    assert "pruned moe_runner_backend=flashinfer_trtllm: trtllm-gen MoE kernels are SM100-only" in proc.stdout


def test_render_prints_a_copy_pasteable_command() -> None:
    proc = _run("render", str(SPACES / "deepseek-v4-flash-rtx-pro-6000.yaml"), "--set", "quant_format=nvfp4",
                "--set", "nccl=ll_ring", "--set", "cuda_graph_max_bs=32")
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("NCCL_PROTO=LL NCCL_ALGO=Ring python3 -m sglang.launch_server --model-path ")
    assert "--cuda-graph-max-bs-decode 32" in line and "--model-path /models/DeepSeek-V4-Flash-NVFP4" in line
    old = _run("render", str(SPACES / "demo-sim.yaml"), "--set", "bogus=1")
    assert old.returncode == 2 and "--set bogus: unknown parameter" in old.stderr


def test_sweep_with_a_broken_space_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nengine: sim\n")
    proc = _run("sweep", "--space", str(bad), "--db", str(tmp_path / "t.db"), cwd=tmp_path)
    assert proc.returncode == 2 and "engine: sim needs a scenario" in proc.stderr
    assert not (tmp_path / "t.db").exists()


def test_show_without_database() -> None:
    proc = _run("show", "--db", "/nonexistent/t.db")
    assert proc.returncode == 2 and "no such database" in proc.stderr  # bad input: exit 2


def test_bench_a_running_server_that_wants_an_api_key(tmp_path: Path) -> None:
    server = start_sim(SCENARIOS / "fast-test.yaml", {"model_path": "/m", "api_key": "sk-bench-key"}, tmp_path)
    try:
        args = ("bench", "--url", server.url, "--concurrency", "4", "--input-len", "16", "--output-len", "32",
                "--warmup", "0.2", "--duration", "1")
        ok = _run(*args, "--json", env={"SGLANG_API_KEY": "sk-bench-key"})
        assert ok.returncode == 0, ok.stderr
        result = json.loads(ok.stdout)
        assert result["tok_s"] > 0 and result["errors"] == []
        denied = _run(*args)
        assert denied.returncode == 1 and "401" in denied.stderr and len(denied.stderr.strip().splitlines()) == 1
    finally:
        server.stop()


def test_inputs_that_used_to_crash_get_one_line_and_exit_2(tmp_path: Path) -> None:
    """Seen with tracebacks before: a binary space, a --set value that is no YAML, YAML's `off` for a
    choice named "off", a port or budget out of range (checked before anything starts)."""
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(128, 256)))
    demo = str(SPACES / "demo-sim.yaml")
    checks = [
        (("validate", str(binary)), f"error: {binary}: not a text file (byte 0 is not UTF-8)"),
        (("render", demo, "--set", "quant_format=[unclosed"),
         "error: --set quant_format=[unclosed: not a value of quant_format (mxfp4, nvfp4)"),
    ]
    for args, line in checks:
        proc = _run(*args, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line], (args, proc.stderr)
    off = _run("render", demo, "--set", "speculative=off", cwd=tmp_path)
    assert off.returncode == 0 and "--speculative-algorithm" not in off.stdout, off.stderr
    for option, value in (("--port", "99999"), ("--budget", "99999999999999999999")):
        command = "dashboard" if option == "--port" else "sweep"
        proc = _run(command, option, value, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and option in proc.stderr


def test_writing_a_product_where_it_cannot_go_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    assert _run("sweep", "--offline", "--budget", "2", "--db", str(db), cwd=tmp_path).returncode == 0
    for command in ("export", "report"):
        for target in (tmp_path / "missing" / "out", tmp_path):
            proc = _run(command, "--db", str(db), "-o", str(target), cwd=tmp_path)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.startswith(f"error: -o {target}: cannot write: "), proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1


def test_a_cluster_address_that_leads_nowhere_fails_fast_in_one_line(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text((FIXTURES / "e2e-space.yaml").read_text().replace("e2e-scenario.yaml",
                                                                       str(FIXTURES / "e2e-scenario.yaml")))
    web = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)  # Ray would wait on it forever
    threading.Thread(target=web.serve_forever, daemon=True).start()
    cases = {"127.0.0.1:1": "cannot reach a Ray cluster there (Connection refused)",
             f"127.0.0.1:{web.server_port}": "something listens there, but not a Ray cluster",
             "no-such-host.invalid:6379": "cannot reach a Ray cluster there",
             "headnode": "expected HOST:PORT",
             "http://127.0.0.1:8265": "that is a dashboard URL"}
    for address, says in cases.items():
        t0 = time.monotonic()
        proc = _run("sweep", "--space", str(space), "--budget", "2", "--address", address, "--db",
                    str(tmp_path / "t.db"), cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and says in lines[0], (address, proc.stderr)
        assert lines[0].startswith(f"error: --address {address}: ")
        assert time.monotonic() - t0 < 30
    web.shutdown()
    assert not (tmp_path / "t.db").exists()


def test_sglang_0_5_17_is_bundled_and_prunes_what_it_refused_on_an_h200(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("name: t\nbase: {model_path: /m}\nparams:\n  attention_backend: {choices: [fa3, trtllm_mha]}\n"
                     "  cuda_graph_max_bs: {choices: [8, 16]}\n")
    old = _run("validate", str(space), "--sglang-version", "0.5.17", "--gpu", "sm_90")
    new = _run("validate", str(space), "--sglang-version", "0.5.23", "--gpu", "sm_90")
    assert old.returncode == 0 and new.returncode == 0, old.stderr + new.stderr
    assert "pruned attention_backend=trtllm_mha: trtllm_mha is only supported on Blackwell" in old.stdout
    assert "pruned" not in new.stdout
    rendered = _run("render", str(space), "--sglang-version", "0.5.17", "--set", "attention_backend=fa3",
                    "--set", "cuda_graph_max_bs=8")
    assert rendered.returncode == 0, rendered.stderr
    assert "--cuda-graph-max-bs-decode 8" in rendered.stdout  # 0.5.17 already has the new name (seen on the GPU)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nbase: {model_path: /m, disable_aiter_allreduce_fusion_in_decode: true}\n")
    refused = _run("validate", str(bad), "--sglang-version", "0.5.17")
    assert refused.returncode == 2 and "0.5.17" in refused.stderr  # the flag 0.5.17 refused at startup
