"""Mixed GPU-group sizes on a real local Ray (8 fake GPUs) with simulated servers: the CLI sweep of the
bundled mixed-size space runs trials of 1-8 GPUs side by side, never two servers on one GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.conftest import our_servers, run_tuner, stored_runs
from tests.tuner.test_mixed_sizes import assert_packed

pytestmark = pytest.mark.e2e
SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def test_a_ray_sweep_packs_trials_of_mixed_sizes(workdir: Path) -> None:
    shutil.copy(SPACES / "mixed-qwen3-30b-h100.yaml", workdir / "mixed.yaml")
    (workdir / "scenarios").mkdir()
    shutil.copy(SPACES / "scenarios" / "qwen3-30b-a3b-8x-h100-mixed.yaml", workdir / "scenarios")
    proc = run_tuner(workdir, "sweep", "--space", "mixed.yaml", "--budget", "10", "--seed", "0", "--gpus", "8")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "8 group(s) of 1 GPU(s) (a trial takes 1/2/4/8 GPUs" in proc.stdout
    assert "best per GPU: trial" in proc.stdout
    runs = stored_runs(workdir / "tuner.db", "mixed-qwen3-30b-h100")
    assert len([r for r in runs if r.status.launched and r.repeat_of is None]) == 10
    assert assert_packed(runs), "trials of different sizes ran at the same time"
    assert "GPUs busy" in run_tuner(workdir, "show").stdout
    assert not our_servers(workdir)
