"""Does the README's demo find the optimum, seed after seed? The real command, on simulated servers.

Each seed runs ``tuner sweep --budget 40 --seed S`` as a user would (local Ray, simulated SGLang
servers over HTTP, real benchmark client, so readings carry the client's and the machine's noise)
on a fresh database, then scores the configuration the sweep ranks best by its *true* (noise-free,
modelled) tok/s@C16 as a share of the exhaustive optimum of the space.

    python benchmarks/demo_seeds.py [--seeds 10] [--first-seed 0] [--budget 40] [--space FILE] [--sampler NAME]

Minutes per seed on 2 cores: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampler_efficiency import _config, landscape, true_value

from db.store import Store
from tuner.results import SweepResults
from tuner.space_loader import load_space

DEMO = Path(__file__).resolve().parent.parent / "search_spaces" / "demo-sim.yaml"


def one_seed(space_path: Path, seed: int, budget: int, sampler: str | None = None) -> tuple[float, float, int]:
    """(true share of the optimum of the best, wall seconds, failed launches) of one demo sweep."""
    model, optimum = landscape(str(space_path))
    space = load_space(space_path, arch=model.scenario.gpu.arch)
    tuner = Path(sys.executable).parent / "tuner"
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "demo.db"
        t0 = time.monotonic()
        subprocess.run([str(tuner), "sweep", "--space", str(space_path), "--budget", str(budget), "--seed", str(seed),
                        "--db", str(db), *(["--sampler", sampler] if sampler else [])],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
        wall = time.monotonic() - t0
        store = Store(db)
        [sweep] = store.sweeps()
        runs = store.runs(sweep.id)
        store.close()
    best = SweepResults(sweep, runs).best()
    assert best is not None, f"seed {seed}: nothing was measured"
    value = true_value(model, space, _config(space, best.params), space.file.benchmark.output_len) or 0.0
    failed = sum(1 for r in runs if r.status.launched and r.tok_s is None)
    return value / optimum, wall, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--space", type=Path, default=DEMO)
    parser.add_argument("--sampler", help="tuner sweep --sampler (default: the sweep's default strategy)")
    args = parser.parse_args()
    shares = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        share, wall, failed = one_seed(args.space, seed, args.budget, args.sampler)
        shares.append(share)
        print(f"seed {seed}: best {share:.1%} of the optimum, {failed} failed launches, {wall:.0f} s", flush=True)
    print(f"{sum(s >= 0.97 for s in shares)}/{len(shares)} seeds >= 97%, median {statistics.median(shares):.1%}, "
          f"worst {min(shares):.1%}")


if __name__ == "__main__":
    main()
