"""What the tuner itself costs per trial, and how the study loop scales with the number of trials.

1. Server lifecycle on the simulated engine: readiness detection (measured startup - modelled
   startup), and teardown (``ServerProcess.stop``), over ``--launches`` launches.
2. Driver work per trial on a real SQLite database: ask + sample, store record, attributes +
   artifacts + tell (``tuner.recording.Recorder``), at growing study sizes up to ``--trials``.

    python benchmarks/overhead.py [--launches 5] [--trials 400]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.types import BenchResult, TrialResult
from db.store import Store
from tests.conftest import SPACES, start_sim
from tuner.recording import Recorder, artifact_store
from tuner.sampler import make_sampler
from tuner.space_loader import load_space
from tuner.study_db import open_study
from workers.sim.offline import OfflineModel

SCENARIO = "name: o\ntime_scale: 100\nbase: {tok_s_c16: 20, ttft_ms: 100, startup_s: 100}\nnoise: {cv: 0}\n"


def lifecycle(launches: int) -> None:
    ready_over, stop_s = [], []
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "o.yaml"
        scenario.write_text(SCENARIO)
        for _ in range(launches):
            server = start_sim(scenario, {"model_path": "/m"}, Path(tmp), wait=False)
            startup = server.wait_ready(30)
            ready_over.append(startup - 100 / 100)
            t0 = time.monotonic()
            server.stop()
            stop_s.append(time.monotonic() - t0)
    print(f"readiness detected {statistics.median(ready_over) * 1000:.0f} ms after the modelled startup "
          f"(median of {launches}; includes Python + uvicorn start and the 0.2 s poll)")
    print(f"teardown (SIGTERM to the tree, wait): median {statistics.median(stop_s) * 1000:.0f} ms")


def fake_result(n: int, key: str, tok_s: float, log: str) -> TrialResult:
    stats = {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0}
    bench = BenchResult(tok_s=tok_s, window_tok_s=(tok_s,), request_throughput=1, per_user_tok_s=1, ttft_ms=stats,
                        tpot_ms=stats, itl_ms=stats, e2e_ms=stats, completed=10, failed=0, output_tokens=100,
                        output_chunks=100, achieved_concurrency=16, concurrency=16, held_concurrency=True,
                        accept_length=None, duration_s=60)
    now = time.time()
    return TrialResult(trial_number=n, config_key=key, argv=("python3", "-m", "sglang.launch_server", "--tp-size", "4"),
                       env={}, sglang_version="0.5.23", node="n", gpu_ids=("0",), started_at=now, finished_at=now,
                       bench=bench, server_log=log)


def driver_scaling(trials: int) -> None:
    space = load_space(SPACES / "demo-sim.yaml", arch="sm_120")
    model = OfflineModel(SPACES / "scenarios" / "deepseek-v4-flash-8x-rtx-pro-6000.yaml")
    log = "x" * 200_000
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "t.db"
        store = Store(db)
        sweep = store.ensure_sweep("o", space_path="-", space_text="", engine="sim", sglang_version="0.5.23",
                                   gpu_name="g", gpu_arch="sm_120", gpu_count=8, driver="-", hosts=[], budget=trials,
                                   roofline_tok_s=None, time_scale=1.0)
        recorder = Recorder(store, sweep, artifact_store(db))
        study = open_study(db, "o", make_sampler(space, seed=0))
        asks, records = [], []
        for n in range(trials):
            t0 = time.perf_counter()
            trial = study.ask()
            config = space.sample(trial)
            t1 = time.perf_counter()
            verdict = model.verdict(config)
            result = fake_result(trial.number, config.key(), verdict.tok_s or 0.0, log)
            recorder.finish(study, trial, config, result, baseline=False)
            t2 = time.perf_counter()
            asks.append(t1 - t0)
            records.append(t2 - t1)
            if n + 1 in (50, 100, 200, 400, 800) or n + 1 == trials:
                window = slice(max(0, n - 19), n + 1)
                ask_ms = statistics.median(asks[window]) * 1000
                record_ms = statistics.median(records[window]) * 1000
                print(f"  after {n + 1:4d} trials: ask+sample {ask_ms:6.1f} ms, "
                      f"record+attrs+artifacts+tell {record_ms:6.1f} ms (median of last 20)")
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    lifecycle(args.launches)
    print("driver work per trial (SQLite, WAL):")
    driver_scaling(args.trials)


if __name__ == "__main__":
    main()
