"""How fast does the sweep find the best configuration? N seeds of the real sweep loop, offline.

Each run is ``tuner sweep --offline`` (the same loop, sampler, dedupe, failure learning and recording
as a sweep of real servers; the scenario's model answers each launch, with its noise) on a fresh
database. Per run: the *true* (noise-free, modelled) value of the configuration the sweep ranks best,
as % of the exhaustive optimum of the space; the launch at which a launched configuration first
reached 95% of it; the true value of the best launched configuration, ranked best or not (column
``found``: the seeds where one reached 97%, so a miss in ranking shows apart from a miss in finding);
infeasible launches; launches that hit a failure already seen in the same sweep
(the same failure rule of the scenario); proposals avoided by a learned rule (no launch); with
``--confirm N``, the launches after the budget that measured leaders again.

    python benchmarks/sampler_efficiency.py [--spaces a.yaml b.yaml] [--strategies model tpe random coordinate]
        [--seeds 10] [--first-seed 0] [--budget 40] [--parallel 1 2] [--jobs 2] [--random N]
        [--first-landscape SEED] [--adjusted] [--run-cv CV] [--confirm N] [--instances K] [--per-seed] [--trace]
"""

from __future__ import annotations

import argparse
import io
import logging
import statistics
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from tuner.live import SweepView
from tuner.parallelism import gpu_sizes, per_objective
from tuner.results import SweepResults
from tuner.space_loader import load_space
from tuner.study import Sweep
from tuner.sweep_state import SweepOptions
from workers.sim.offline import OfflineModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from external_samplers import register
from random_landscape import RUN_CV, adjusted, redraw, write_many

EXTERNAL = register()  # strategies from optimizers that install here (SMAC3)

SPACES = ["search_spaces/demo-sim.yaml", "search_spaces/demo-sim-hopper.yaml",
          "search_spaces/hard-deepseek-v3-h200.yaml", "search_spaces/hard-kimi-k2-b200.yaml",
          "search_spaces/hard-llama-70b-h100.yaml", "search_spaces/mixed-qwen3-30b-h100.yaml"]


@dataclass(frozen=True)
class Run:
    """One offline sweep's outcome."""

    space: str
    strategy: str
    parallel: int
    seed: int
    best_share: float
    found_share: float  # the best true value among the launched configurations: ranked or not
    reached_95: int | None
    infeasible: int
    repeated_failures: int
    avoided: int
    confirmations: int  # launches after the budget (--confirm): measured again, not searched
    seconds: float
    run_alike: int = 0  # proposals answered from a run of other settings that SGLang runs alike (tuner/runs_as.py)


@cache
def landscape(space_path: str) -> tuple[OfflineModel, float]:
    """The space's offline model and its exhaustive optimum (modelled tok/s@C16, no run noise)."""
    space = load_space(space_path)
    assert space.file.scenario, f"{space_path}: the space must name a scenario"
    model = OfflineModel(Path(space_path).parent / space.file.scenario)
    space = load_space(space_path, arch=model.scenario.gpu.arch)
    out = space.file.benchmark.output_len
    values = [v for p in space.iter_configs() if (v := true_value(model, space, space.from_params(p), out))]
    return model, max(values)


def true_value(model: OfflineModel, space, config, output_len: int) -> float | None:  # type: ignore[no-untyped-def]
    """The modelled (noise-free) value the sweep maximizes: tok/s@C16, per GPU with ``objective: per_gpu``."""
    tok_s = model.verdict(config, 16, output_len).tok_s
    return None if tok_s is None else per_objective(tok_s, config.flags, space.file.objective)


def sweep_runs(space_path: str, strategy: str, parallel: int, seed: int, budget: int,  # type: ignore[no-untyped-def]
               confirm: int = 0):
    """One offline sweep on a fresh database: (its sweep row, its runs, seconds taken)."""
    space = load_space(space_path)
    with tempfile.TemporaryDirectory() as tmp:
        mixed = len(gpu_sizes(space)) > 1  # trials of several sizes share the scenario's GPUs: no group count
        opts = SweepOptions(space_path=space_path, db_path=f"{tmp}/b.db", budget=budget, seed=seed, offline=True,
                            confirm=confirm, sampler=strategy, max_groups=None if mixed else parallel,
                            gpus=None if mixed else parallel * space.file.gpus_per_trial)
        quiet = Console(file=io.StringIO())
        t0 = time.perf_counter()
        sweep = Sweep(opts, lambda n, b, s: SweepView(quiet, n, b, s)).run()
        seconds = time.perf_counter() - t0
        from db.store import Store

        store = Store(opts.db_path)
        runs = store.runs(sweep.id)
        store.close()
    return sweep, runs, seconds


def one_run(space_path: str, strategy: str, parallel: int, seed: int, budget: int, confirm: int = 0) -> Run:
    """One offline sweep on a fresh database, scored."""
    model, optimum = landscape(space_path)
    space = load_space(space_path)
    sweep, runs, seconds = sweep_runs(space_path, strategy, parallel, seed, budget, confirm)
    out = space.file.benchmark.output_len
    best = SweepResults(sweep, runs).best()
    best_true = true_value(model, space, _config(space, best.params), out)
    launched = [r for r in runs if r.status.launched and r.repeat_of is None]
    values = [(true_value(model, space, _config(space, r.params), out) or 0) if r.tok_s is not None else 0.0
              for r in launched]
    reached = next((i + 1 for i, v in enumerate(values) if v >= 0.95 * optimum), None)
    seen_rules: set[int] = set()
    repeated = 0
    for r in launched:
        if r.tok_s is None:
            rule = model.outcome(_config(space, r.params)).failure
            index = model.scenario.failures.index(rule) if rule is not None else -1
            repeated += index in seen_rules
            seen_rules.add(index)
    return Run(Path(space_path).stem, strategy, parallel, seed, (best_true or 0) / optimum,
               max(values, default=0.0) / optimum, reached,
               sum(r.tok_s is None for r in launched), repeated, sum(r.status == "avoided" for r in runs),
               sum(r.repeat_of is not None and not r.remeasure for r in runs), seconds, _run_alike(runs))


def _run_alike(runs):  # type: ignore[no-untyped-def]
    """Proposals answered from the run of a configuration with other settings (SGLang runs them alike)."""
    params = {r.trial_number: r.params for r in runs}
    return sum(r.status == "cached" and r.cached_from is not None and params.get(r.cached_from) != r.params
               for r in runs)


def _config(space, params):  # type: ignore[no-untyped-def]
    return space.from_params(params) if params else space.baseline()


def trace(space_path: str, strategy: str, parallel: int, seed: int, budget: int) -> None:
    """Print each launch of one sweep, in order: its status, true share of the optimum, reading, the
    scenario's failure rule it hit, and the settings it changed from the best launch before it."""
    model, optimum = landscape(space_path)
    space = load_space(space_path)
    _sweep, runs, _seconds = sweep_runs(space_path, strategy, parallel, seed, budget)
    out = space.file.benchmark.output_len
    best: tuple[float, dict] | None = None  # type: ignore[type-arg]
    for i, r in enumerate(runs):
        config = _config(space, r.params)
        value = true_value(model, space, config, out) if r.tok_s is not None else None
        failure = model.outcome(config).failure if r.tok_s is None else None
        changed = r.params if best is None else {k: v for k, v in r.params.items() if best[1].get(k) != v}
        print(f"{i:>3} {r.status:<11} true {f'{value / optimum:.1%}' if value else '-':>6} "
              f"read {f'{r.tok_s:.0f}' if r.tok_s else '-':>6} "
              f"{'fails as ' + str(failure.match) + ' ' if failure else ''}changed {changed}")
        if r.tok_s is not None and (best is None or r.tok_s > best[0]):
            best = (r.tok_s, dict(r.params))


def summarize(runs: list[Run], budget: int) -> None:
    """One line per (space, strategy, parallel)."""
    print(f"{'space':<24} {'strategy':<11} {'par':>3} {'>=97%':>6} {'median':>7} {'worst':>6} "
          f"{'found':>6} {'95% at':>6} {'infeas':>6} {'repeat':>6} {'avoid':>6} {'alike':>6} {'conf':>5} "
          f"{'s/run':>6}")
    keys = sorted({(r.space, r.strategy, r.parallel) for r in runs})
    for space, strategy, parallel in keys:
        rs = [r for r in runs if (r.space, r.strategy, r.parallel) == (space, strategy, parallel)]
        shares = [r.best_share for r in rs]
        reached = [r.reached_95 for r in rs if r.reached_95 is not None]
        print(f"{space:<24} {strategy:<11} {parallel:>3} {sum(s >= 0.97 for s in shares):>3}/{len(rs):<2} "
              f"{statistics.median(shares):>7.1%} {min(shares):>6.1%} "
              f"{sum(r.found_share >= 0.97 for r in rs):>3}/{len(rs):<2} "
              f"{statistics.median(reached) if reached else '-':>6} "
              f"{statistics.mean(r.infeasible for r in rs):>6.1f} "
              f"{statistics.mean(r.repeated_failures for r in rs):>6.1f} "
              f"{statistics.mean(r.avoided for r in rs):>6.1f} {statistics.mean(r.run_alike for r in rs):>6.1f} "
              f"{statistics.mean(r.confirmations for r in rs):>5.1f} "
              f"{statistics.mean(r.seconds for r in rs):>6.1f}")


def _quiet() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="*", default=SPACES, help="(none: only the --random ones)")
    parser.add_argument("--strategies", nargs="+", default=["model", "tpe", "random", "coordinate"])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed+seeds-1 "
                        "(held-out seeds: check a change on seeds it was not tuned on)")
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2], help="trials in flight (GPU groups)")
    parser.add_argument("--jobs", type=int, default=2, help="sweeps run at once (processes)")
    parser.add_argument("--per-seed", action="store_true", help="print every run")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="also N random landscapes nobody tuned to (benchmarks/random_landscape.py)")
    parser.add_argument("--first-landscape", type=int, default=1000, metavar="SEED",
                        help="the random landscapes' seeds start here (1000: the table's; others: held out)")
    parser.add_argument("--confirm", type=int, default=0, metavar="N",
                        help="tuner sweep --confirm N: the N best measured again after the budget (column conf)")
    parser.add_argument("--run-cv", type=float, default=RUN_CV, metavar="CV",
                        help="the random landscapes' launch-to-launch noise (scenario noise.run_cv)")
    parser.add_argument("--trace", action="store_true", help="print each launch of one sweep (the first "
                        "strategy, parallel and seed): its true share, the scenario's failure it hit, what it changed")
    parser.add_argument("--adjusted", action="store_true", help="each --random landscape with one setting "
                        "that makes SGLang run another at one value (random_landscape.adjusted: random-N-adjusted)")
    parser.add_argument("--instances", type=int, default=1, metavar="K",
                        help="each --spaces landscape also with its scenario's noise seed moved on by 1..K-1 "
                        "(named space@1, ...): K draws of its deviations and launch noise")
    args = parser.parse_args()
    _quiet()
    args.spaces = [p for path in args.spaces for p in redraw(path, args.instances)]
    if args.random:
        drawn = write_many(args.first_landscape, args.random, args.run_cv)
        args.spaces = [*args.spaces, *(map(adjusted, drawn) if args.adjusted else drawn)]
    for path in args.spaces:
        _model, optimum = landscape(path)
        print(f"{Path(path).stem}: optimum {optimum:.2f} modelled tok/s@C16", flush=True)
    if args.trace:
        for path in args.spaces:
            trace(path, args.strategies[0], args.parallel[0], args.first_seed, args.budget)
        return
    tasks = [(s, k, p, seed, args.budget, args.confirm)
             for s in args.spaces for k in args.strategies for p in args.parallel
             for seed in range(args.first_seed, args.first_seed + args.seeds)]
    with ProcessPoolExecutor(args.jobs, initializer=_quiet) as pool:
        runs = list(pool.map(one_run, *zip(*tasks, strict=True)))
    if args.per_seed:
        for r in runs:
            print(f"{r.space:<24} {r.strategy:<11} par {r.parallel} seed {r.seed}: best {r.best_share:.1%} "
                  f"(launched {r.found_share:.1%}), 95% at launch {r.reached_95 or '-'}, "
                  f"infeasible {r.infeasible}, repeated failures "
                  f"{r.repeated_failures}, avoided {r.avoided}, run alike {r.run_alike}, {r.seconds:.1f} s")
    summarize(runs, args.budget)


if __name__ == "__main__":
    main()
