"""How fast does the sweep's sampler find good configurations? Measured on the offline model.

Each seed replays the sweep's loop against the scenario as a function (no servers): the baseline
trial (base settings only, no parameters) first; ``--parallel`` trials in flight (constant liar);
the budget counts distinct launched configurations; a suggestion already measured (or in flight) is
answered with the stored value, as the sweep answers it from the store, and costs no budget;
infeasible configurations (startup failure, garbage output caught by the gate, runtime crash) are
told as infeasible. Compared: the sweep's sampler and Optuna's RandomSampler (forbid-aware too) in
the same loop.
Reported: the median over seeds of the best modelled tok/s@C16 found, and of the trial at which 95%
of the space's optimum was first reached.

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

from tuner.sampler import ForbidAwareSampler, make_sampler
from tuner.space import ForbiddenConfig, SearchSpace
from tuner.space_loader import load_space
from workers.sim.offline import OfflineModel
from workers.types import Config

MAX_ASKS = 2000


def run(space: SearchSpace, budget: int, seed: int, kind: str, model: OfflineModel, optimum: float,
        parallel: int) -> tuple[float, int]:
    """One replay of the sweep; (best modelled tok/s, launch at which 95% of the optimum was reached)."""
    sampler = (make_sampler(space.violates, seed) if kind == "tpe"
               else ForbidAwareSampler(optuna.samplers.RandomSampler(seed=seed), space.violates, seed=seed))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    output_len = space.file.benchmark.output_len
    measured: dict[str, float | None] = {}
    in_flight: list[tuple[optuna.Trial, Config]] = [(study.ask(), space.baseline())]
    best, reached, launched, asks = 0.0, budget + 1, 0, 0

    def tell(trial: optuna.Trial, tok_s: float | None) -> None:
        trial.set_constraint("failed", 1.0 if tok_s is None else 0.0)
        study.tell(trial, 0.0 if tok_s is None else tok_s)

    while in_flight:
        while len(in_flight) < parallel and launched + len(in_flight) < budget and asks < MAX_ASKS:
            trial = study.ask()
            asks += 1
            try:
                config = space.sample(trial)
            except ForbiddenConfig:
                tell(trial, None)  # as the sweep tells it
                continue
            key = config.key()
            if key in measured or any(key == c.key() for _, c in in_flight):
                tell(trial, measured.get(key))  # the sweep answers it from the store
                continue
            in_flight.append((trial, config))
        trial, config = in_flight.pop(0)
        tok_s = model.verdict(config, 16, output_len).tok_s
        measured[config.key()] = tok_s
        launched += 1
        tell(trial, tok_s)
        best = max(best, tok_s or 0.0)
        if best >= 0.95 * optimum and reached > budget:
            reached = launched
    return best, reached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="search_spaces/demo-sim.yaml")
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=2, help="trials in flight (GPU groups)")
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
        results = [run(space, args.budget, seed, kind, model, optimum, args.parallel) for seed in range(args.seeds)]
        bests = [b for b, _ in results]
        reached = [r for _, r in results]
        hit = sum(1 for r in reached if r <= args.budget)
        print(f"{kind:>6}: best after {args.budget} trials: median {statistics.median(bests):.2f} "
              f"({statistics.median(bests) / optimum:.1%} of optimum), min {min(bests):.2f}; "
              f"reached 95% of optimum in {hit}/{args.seeds} runs, median trial "
              f"{statistics.median(r for r in reached if r <= args.budget) if hit else '-'}")


if __name__ == "__main__":
    main()
