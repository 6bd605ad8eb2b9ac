"""How fast does the sweep's sampler find good configurations? Measured on the offline model.

For each seed, a study of ``--budget`` trials is run with the sweep's sampler (forbid-aware
multivariate TPE with constant liar) and with Optuna's RandomSampler, against the scenario as a
function (no servers): infeasible configurations (startup failure, garbage output caught by the
gate, runtime crash) are told as infeasible exactly as the sweep tells them. Reported: the median
over seeds of the best modelled tok/s@C16 found, and of the trial at which 95% of the space's
optimum was first reached.

    python benchmarks/sampler_efficiency.py [--space search_spaces/demo-sim.yaml] [--budget 40] [--seeds 20]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import warnings
from pathlib import Path

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.sampler import make_sampler
from tuner.space_loader import load_space
from workers.sim.offline import OfflineModel


def run(space_path: str, budget: int, seed: int, kind: str, model: OfflineModel, optimum: float) -> tuple[float, int]:
    space = load_space(space_path, arch=model.scenario.gpu.arch)
    sampler = make_sampler(space.violates, seed) if kind == "tpe" else optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    best, reached = 0.0, budget + 1
    for i in range(budget):
        trial = study.ask()
        config = space.sample(trial)
        verdict = model.verdict(config, 16, space.file.benchmark.output_len)
        if verdict.tok_s is None:
            trial.set_constraint("failed", 1.0)
            study.tell(trial, 0.0)
            continue
        trial.set_constraint("failed", 0.0)
        study.tell(trial, verdict.tok_s)
        best = max(best, verdict.tok_s)
        if best >= 0.95 * optimum and reached > budget:
            reached = i + 1
    return best, reached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="search_spaces/demo-sim.yaml")
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    space = load_space(args.space)
    assert space.file.scenario, "the space must name a scenario"
    model = OfflineModel(Path(args.space).parent / space.file.scenario)
    space = load_space(args.space, arch=model.scenario.gpu.arch)
    scores = [v.tok_s for cfg in space.iter_configs()
              if (v := model.verdict(space.from_params(cfg), 16, space.file.benchmark.output_len)).tok_s]
    optimum = max(scores)
    print(f"space {space.name}: {space.cardinality():,} configurations, {len(scores):,} feasible; "
          f"optimum {optimum:.2f} modelled tok/s@C16, median feasible {statistics.median(scores):.2f}")
    for kind in ("tpe", "random"):
        results = [run(args.space, args.budget, seed, kind, model, optimum) for seed in range(args.seeds)]
        bests = [b for b, _ in results]
        reached = [r for _, r in results]
        hit = sum(1 for r in reached if r <= args.budget)
        print(f"{kind:>6}: best after {args.budget} trials: median {statistics.median(bests):.2f} "
              f"({statistics.median(bests) / optimum:.1%} of optimum), min {min(bests):.2f}; "
              f"reached 95% of optimum in {hit}/{args.seeds} runs, median trial "
              f"{statistics.median(reached) if hit else '-'}")


if __name__ == "__main__":
    main()
