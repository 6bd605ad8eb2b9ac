"""Parallel sizes as searched knobs: each trial holds the GPUs its settings need (tp x dp, attention DP
splitting TP) as an aligned block of one node, no GPU runs two servers at once, trials of different
sizes run side by side, and `objective: per_gpu` ranks by tok/s@C16 per GPU. Offline here (the loop,
store and study are the real ones); tests/e2e/test_mixed_sizes.py runs it on Ray with simulated servers."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import optuna
from rich.console import Console

from db.store import RunRow, Store
from tuner.live import SweepView
from tuner.parallelism import gpus_needed
from tuner.results import SweepResults
from tuner.study import Sweep
from tuner.sweep_state import SweepOptions

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "mixed-qwen3-30b-h100.yaml"


def assert_packed(runs: list[RunRow]) -> set[tuple[int, int]]:
    """Check the GPUs of every launch; returns the pairs of sizes that ran at the same time."""
    launched = [r for r in runs if r.status.launched and r.gpu_ids]
    for r in launched:
        ids = sorted(int(g) for g in r.gpu_ids)
        n = gpus_needed(r.flags)
        assert len(ids) == n, f"trial {r.trial_number} needs {n} GPUs, held {ids}"
        assert ids == list(range(ids[0], ids[0] + n)) and ids[0] % n == 0, f"trial {r.trial_number}: {ids}"
    for gpu in {g for r in launched for g in r.gpu_ids}:
        spans = sorted((r.started_at, r.finished_at, r.trial_number) for r in launched if gpu in r.gpu_ids)
        for a, b in itertools.pairwise(spans):
            assert a[1] is not None and b[0] is not None and a[1] <= b[0], f"GPU {gpu}: trials {a[2]} and {b[2]}"
    return {(len(a.gpu_ids), len(b.gpu_ids)) for a, b in itertools.combinations(launched, 2)
            if a.started_at and b.started_at and a.finished_at and b.finished_at
            and a.started_at < b.finished_at and b.started_at < a.finished_at and len(a.gpu_ids) != len(b.gpu_ids)}


def test_trials_of_mixed_sizes_share_the_node_and_rank_per_gpu(tmp_path: Path) -> None:
    opts = SweepOptions(space_path=str(SPACE), db_path=str(tmp_path / "m.db"), budget=24, seed=0, offline=True)
    sweep = Sweep(opts, lambda n, b, s: SweepView(Console(file=io.StringIO()), n, b, s)).run()
    store = Store(opts.db_path)
    results = SweepResults(sweep, store.runs(sweep.id))
    store.close()
    side_by_side = assert_packed(results.runs)
    assert side_by_side, "trials of different sizes ran at the same time"
    sizes = {len(r.gpu_ids) for r in results.runs if r.gpu_ids}
    assert {1, 2} <= sizes and max(sizes) >= 4
    measured = results.measured()
    per_gpu = {r.trial_number: results.median(r) / gpus_needed(r.flags) for r in measured}
    best = results.best()
    assert best is not None and per_gpu[best.trial_number] == max(per_gpu.values())
    assert gpus_needed(best.flags) > 1 and results.median(best) < max(results.median(r) for r in measured)
    study = optuna.load_study(study_name=sweep.study_name, storage=f"sqlite:///{opts.db_path}")
    for r in measured:
        assert study.trials[r.trial_number].value == r.tok_s / gpus_needed(r.flags)  # Optuna maximizes per GPU
    busy = results.gpu_busy()
    assert busy is not None and busy[1] == 8
