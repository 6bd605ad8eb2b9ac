"""How a real SGLang's tok/s@C16 varies: window to window on one server, launch to launch of one
configuration, and between configurations that run the same kernels at C16 (CUDA-graph sizes of 16
and above: the batch-16 graph is the same). The simulator's ``noise:`` (docs/simulator.md) says a
configuration has its own fixed deviation (``cv``) and each launch its own (``run_cv``); this measures
what the real engine does. Launches are interleaved (A B C A B C ...), so a drift of the machine
spreads over every configuration instead of looking like a difference between them.

    python3 benchmarks/real_gpu/noise_probe.py OUT [ROUNDS] [FIRST_ROUND]   # run.sh noise OUT sets it up

Appends one JSON line per launch to /tmp/real-noise/noise.jsonl (kept while the node is warm: a
second call adds rounds; a fresh node starts an empty file), copies it to OUT and prints the summary
of every launch in it.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from real_gpu.paths import spec

from core.flags import introspect
from core.types import BenchConfig
from workers.trial import TrialRunner

CONFIGS = {"graphs-32": {"cuda_graph_max_bs": 32}, "graphs-64": {"cuda_graph_max_bs": 64},
           "graphs-128": {"cuda_graph_max_bs": 128}}
BENCH = BenchConfig(concurrency=16, input_len=512, output_len=128, warmup_s=3, duration_s=8, repeats=3)


def launch(runner: TrialRunner, number: int, flags: dict[str, object], out: Path) -> dict[str, object]:
    """One launch of ``flags`` on top of the kit's base: its startup and its benchmark windows."""
    result = runner.run(spec(number, flags, out, bench=BENCH))
    windows = list(result.bench.window_tok_s) if result.bench else []
    return {"ok": result.ok, "startup_s": round(result.startup_s or 0, 1), "windows": [round(w, 1) for w in windows],
            "reason": result.failure_reason[:200]}


def summary(launches: list[tuple[str, list[float]]]) -> None:
    """Window-to-window, launch-to-launch and between-configuration spreads of ``launches`` (each: its
    configuration's name and its windows' tok/s@C16, two or more), as log sd (about a share)."""
    logs = [(name, [math.log(w) for w in windows]) for name, windows in launches]
    within = [statistics.pvariance(v) for _, v in logs]
    launch_logs: dict[str, list[float]] = {}
    for name, v in logs:
        launch_logs.setdefault(name, []).append(statistics.mean(v))
    between_launch = [statistics.variance(v) for v in launch_logs.values() if len(v) >= 2]
    for name, v in launch_logs.items():
        print(f"{name}: {len(v)} launches, tok/s@C16 (mean of windows) {[round(math.exp(x)) for x in v]}")
    if within:
        print(f"window to window, one server: sd {math.sqrt(statistics.mean(within)):.3f} (log), {len(logs)} launches")
    if between_launch:
        launch_var = statistics.mean(between_launch)
        print(f"launch to launch, one configuration: sd {math.sqrt(launch_var):.3f} (log)")
        means = [statistics.mean(v) for v in launch_logs.values()]
        n = statistics.mean(len(v) for v in launch_logs.values())
        if len(means) >= 2:
            spread = statistics.variance(means)
            own = max(spread - launch_var / n, 0.0)
            alone, own_sd = math.sqrt(launch_var / n), math.sqrt(own)
            print(f"configuration means: sd {math.sqrt(spread):.3f} (log); from launch noise alone {alone:.3f}; "
                  f"own deviation of a configuration (estimate): sd {own_sd:.3f}")


def main() -> None:
    out = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    out.mkdir(parents=True, exist_ok=True)
    path = Path("/tmp/real-noise/noise.jsonl")
    path.parent.mkdir(exist_ok=True)
    runner = TrialRunner(introspect(sys.executable), "gpu-node", ("0",))
    for rnd in range(first, first + rounds):
        for k, (name, flags) in enumerate(CONFIGS.items()):
            t0 = time.time()
            measured = launch(runner, rnd * len(CONFIGS) + k, flags, out)
            row = {"config": name, "round": rnd, **measured, "at": time.strftime("%H:%M:%S"),
                   "wall_s": round(time.time() - t0, 1)}
            print(json.dumps(row), flush=True)
            with path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
    shutil.copy(path, out / "noise.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    summary([(r["config"], r["windows"]) for r in rows if r["ok"] and len(r["windows"]) >= 2])


if __name__ == "__main__":
    main()
