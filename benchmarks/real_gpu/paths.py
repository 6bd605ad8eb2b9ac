"""Every trial path on a real SGLang, through the worker's own code (TrialRunner: render, start,
readiness, failure classification, benchmark, stop), no Ray. Prints one row per path and keeps each
server log under OUT (the fixtures of tests/fixtures/real-logs/ are trimmed from them).

    python3 benchmarks/real_gpu/paths.py OUT      # on a GPU node with the kit (real_gpu.sh sets it up)
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.flags import FlagTable, introspect
from core.types import BenchConfig, Config, EngineKind, EngineSpec, GateConfig, TrialResult, TrialSpec
from workers.gpus import detect_gpus
from workers.trial import TrialRunner

BASE = {"model_path": "/tmp/tiny", "load_format": "dummy", "attention_backend": "triton",
        "sampling_backend": "pytorch", "grammar_backend": "none", "mem_fraction_static": 0.3}
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
BENCH = BenchConfig(concurrency=16, input_len=512, output_len=128, warmup_s=3, duration_s=10)


LOGS = Path("/tmp/real-gpu-logs")


def spec(n: int, flags: dict[str, object], out: Path, timeout_s: float = 300, bench: BenchConfig = BENCH) -> TrialSpec:
    """Trial ``n``: ``flags`` on top of the kit's base, measured by ``bench``."""
    return TrialSpec(trial_number=n, config=Config(params={}, flags={**BASE, **flags}, env=dict(ENV)),
                     engine=EngineSpec(kind=EngineKind.SGLANG, python=sys.executable), bench=bench,
                     gate=GateConfig(enabled=False), startup_timeout_s=timeout_s, log_dir=str(LOGS))


def kill_scheduler_when_measuring(runner: TrialRunner) -> None:
    """Once the benchmark measures, SIGKILL the server's scheduler child (by PID)."""
    deadline = time.time() + 400
    while time.time() < deadline:
        server = runner._server
        if runner.phase.phase == "measuring" and server is not None and server.proc is not None:
            time.sleep(3)
            for child in psutil.Process(server.proc.pid).children(recursive=True):
                if "scheduler" in " ".join(child.cmdline()) or "scheduler" in child.name():
                    child.kill()
                    return
            return
        time.sleep(0.5)


def row(name: str, result: TrialResult) -> dict[str, object]:
    return {"path": name, "verdict": "ok" if result.ok else "failed", "kind": result.failure_kind or "",
            "reason": result.failure_reason[:160], "startup_s": round(result.startup_s or 0, 1),
            "tok_s": round(result.bench.tok_s, 1) if result.bench else None}


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    real = introspect(sys.executable)
    newer = FlagTable.bundled("0.5.23")
    only_newer = sorted(d for d, f in newer.flags.items() if d not in real.flags and f.kind == "bool")
    print(f"SGLang {real.version}, {len(real.flags)} options introspected in {time.time() - t0:.0f} s; GPU "
          f"{detect_gpus()}; options only 0.5.23 has: {len(only_newer)}", flush=True)
    runner = TrialRunner(real, "gpu-node", ("0",))
    paths: list[tuple[str, TrialSpec, TrialRunner]] = [
        ("ok cuda_graph_max_bs=32", spec(1, {"cuda_graph_max_bs": 32}, out), runner),
        ("ok cuda_graph_max_bs=8", spec(2, {"cuda_graph_max_bs": 8}, out), runner),
        ("unsupported attention_backend=trtllm_mha", spec(3, {"attention_backend": "trtllm_mha"}, out), runner),
        ("oom kv cache mem_fraction_static=0.001", spec(4, {"mem_fraction_static": 0.001}, out), runner),
        ("oom cuda graph capture bs=4096 mem=0.03",
         spec(5, {"cuda_graph_max_bs": 4096, "mem_fraction_static": 0.03}, out), runner),
        ("startup timeout 15 s", spec(6, {}, out, timeout_s=15), runner),
    ]
    if only_newer:  # an option this SGLang does not know: its own parser refuses it
        paths.append((f"bad flag --{only_newer[0].replace('_', '-')} (0.5.23 only)",
                      spec(7, {only_newer[0]: True}, out), TrialRunner(newer, "gpu-node", ("0",))))
    rows = []
    for name, s, r in paths:
        rows.append(row(name, r.run(s)))
        print(json.dumps(rows[-1]), flush=True)
    killer = threading.Thread(target=kill_scheduler_when_measuring, args=(runner,), daemon=True)
    killer.start()
    rows.append(row("scheduler killed mid-benchmark", runner.run(spec(8, {}, out))))
    print(json.dumps(rows[-1]), flush=True)
    (out / "paths.json").write_text(json.dumps(rows, indent=1))
    shutil.make_archive(str(out / "server-logs"), "gztar", LOGS)  # one file: few come back from the device
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
