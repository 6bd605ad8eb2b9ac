"""How busy do the GPUs stay when trials need 1, 2, 4 or 8 of them? (search issue #13, part 1)

Runs the mixed-size space (search_spaces/mixed-qwen3-30b-h100.yaml: tp_size, ep_size, attention DP
searched together on 8 GPUs) for N seeds and prints, per seed, the share of GPU-time the launched
trials held their GPUs from the first launch to the last end (tuner.results.SweepResults.gpu_busy),
with the default scheduling (aligned blocks, EASY backfilling) and with strict first-come-first-served
(no trial starts ahead of an older one that waits for GPUs). Offline (the scenario's model on a virtual
clock: exact, seconds per sweep) by default; ``--ray`` runs the same sweeps on a local Ray with 8 fake
GPUs and the simulated servers (real time, minutes per sweep).

    python benchmarks/gpu_packing.py [--seeds 5] [--budget 40] [--ray]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

import tuner.sweep_state as sweep_state
from db.store import Store
from tuner.live import SweepView
from tuner.results import SweepResults
from tuner.study import Sweep
from tuner.sweep_state import SweepOptions

SPACE = str(Path(__file__).resolve().parent.parent / "search_spaces" / "mixed-qwen3-30b-h100.yaml")


def busy(seed: int, budget: int, offline: bool) -> tuple[float, dict[int, int]]:
    """(GPU-busy share, launches per GPU count) of one sweep on a fresh database."""
    with tempfile.TemporaryDirectory() as tmp:
        opts = SweepOptions(space_path=SPACE, db_path=f"{tmp}/p.db", budget=budget, seed=seed, offline=offline,
                            gpus=8)
        sweep = Sweep(opts, lambda n, b, s: SweepView(Console(file=io.StringIO()), n, b, s)).run()
        store = Store(opts.db_path)
        results = SweepResults(sweep, store.runs(sweep.id))
        store.close()
    sizes: dict[int, int] = {}
    for r in results.runs:
        if r.status.launched and r.gpu_ids:
            sizes[len(r.gpu_ids)] = sizes.get(len(r.gpu_ids), 0) + 1
    share = results.gpu_busy()
    return (share[0] if share else 0.0), dict(sorted(sizes.items()))


def main() -> None:
    import logging

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--ray", action="store_true", help="a local Ray with 8 fake GPUs and simulated servers")
    args = parser.parse_args()
    default_limit = sweep_state.MAX_PASSED_OVER
    for policy, limit in (("backfill (default)", default_limit), ("first come, first served", 0)):
        sweep_state.MAX_PASSED_OVER = limit
        shares = []
        for seed in range(args.seeds):
            share, sizes = busy(seed, args.budget, offline=not args.ray)
            shares.append(share)
            print(f"{policy}: seed {seed}: GPUs busy {share:.1%}; launches by GPUs {sizes}", flush=True)
        print(f"{policy}: median {statistics.median(shares):.1%}, worst {min(shares):.1%}", flush=True)


if __name__ == "__main__":
    main()
