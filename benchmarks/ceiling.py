"""What can any search reach on a landscape? The ceiling of "best after N launches >= 97% of the optimum".

A scenario's value of a configuration is its modelled (structural) value times the configuration's own
deviation (``noise.cv``: what that configuration *is*, not a reading's noise, one draw per set of effects
it matches; `workers/sim/scenario.py`).
The exhaustive optimum that `sampler_efficiency.py` scores against is the luckiest of those deviations,
and no model can tell which of several structurally equal configurations is the lucky one without
launching each. This prints, per space: the structural optimum as a share of the exhaustive one; how
many configurations share it and how many of them clear the 97% line; and, for an *oracle* that
knows the structural optimum from the start and launches k of its configurations once each (the
scenario's reading noise: ``run_cv``, outliers), the chance that the one it ranks best (the best
reading, as `tuner show` ranks) clears 97%, and that one launched does. A search whose count of
seeds at >= 97% is near the oracle's with as many launches spent at the top is limited by the
landscape, not by its model.

    python benchmarks/ceiling.py [--spaces a.yaml b.yaml] [--random N] [--first-landscape SEED]
        [--members 5 10 15 20] [--draws 20000]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from random_landscape import write_many
from sampler_efficiency import SPACES, true_value

from core.errors import ConfigError
from tuner.space_loader import load_space
from workers.sim.offline import OfflineModel

TARGET = 0.97
SAME = 1e-3  # structural values this close to the structural optimum count as equal to it


def shares(space_path: str) -> tuple[np.ndarray, np.ndarray, OfflineModel]:
    """Per configuration of the space (failing ones 0): its value and its structural value (the
    scenario without ``noise.cv``), both as shares of the exhaustive optimum; and the scenario's model."""
    space = load_space(space_path)
    assert space.file.scenario, f"{space_path}: the space must name a scenario"
    model = OfflineModel(Path(space_path).parent / space.file.scenario)
    scenario = model.scenario
    structural = OfflineModel(scenario.model_copy(update={"noise": scenario.noise.model_copy(update={"cv": 0.0})}))
    space = load_space(space_path, arch=scenario.gpu.arch)
    out = space.file.benchmark.output_len
    configs = [space.from_params(p) for p in space.iter_configs()]
    value = np.array([true_value(model, space, c, out) or 0.0 for c in configs])
    plain = np.array([true_value(structural, space, c, out) or 0.0 for c in configs])
    return value / value.max(), plain / value.max(), model


def oracle(top: np.ndarray, k: int, model: OfflineModel, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """(chance the best reading's configuration clears the target, chance a launched one does) for
    ``k`` distinct configurations drawn from ``top`` (their values), each read once with the scenario's
    reading noise."""
    picks = np.array([rng.choice(top, k, replace=False) for _ in range(draws)])
    launches = rng.integers(2 ** 62, size=picks.size).tolist()
    readings = picks * np.reshape([model.scenario.noise.launch_factor(s) for s in launches], picks.shape)
    ranked = picks[np.arange(draws), readings.argmax(axis=1)]
    return float(np.mean(ranked >= TARGET)), float(np.mean(picks.max(axis=1) >= TARGET))


def report(space_path: str, members: list[int], draws: int, seed: int) -> None:
    """Print one space's ceiling (module docstring)."""
    value, plain, model = shares(space_path)
    best = plain.max()
    top = value[plain >= best * (1 - SAME)]
    print(f"{Path(space_path).stem}: {len(value)} configurations, {np.mean(value == 0):.0%} fail; "
          f"{int(np.sum(value >= TARGET))} at >= {TARGET:.0%} of the optimum; structural optimum "
          f"{best:.1%} of it, shared by {len(top)} configurations, {int(np.sum(top >= TARGET))} of them "
          f"at >= {TARGET:.0%}")
    rng = np.random.default_rng(seed)
    for k in sorted({min(k, len(top)) for k in members}):
        ranked, launched = oracle(top, k, model, draws, rng)
        print(f"  oracle launching {k:>2} of them once each: ranked best >= {TARGET:.0%} in "
              f"{ranked:.0%} of sweeps, one launched >= {TARGET:.0%} in {launched:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="*", default=SPACES, help="(none: only the --random ones)")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="also N random landscapes (benchmarks/random_landscape.py)")
    parser.add_argument("--first-landscape", type=int, default=1000, metavar="SEED")
    parser.add_argument("--members", type=int, nargs="+", default=[5, 10, 15, 20],
                        help="configurations of the structural optimum the oracle launches")
    parser.add_argument("--draws", type=int, default=20000, help="oracle sweeps drawn per count")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spaces = [*args.spaces, *write_many(args.first_landscape, args.random)]
    try:
        for path in spaces:
            report(path, args.members, args.draws, args.seed)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
