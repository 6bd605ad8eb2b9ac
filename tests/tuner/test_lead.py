"""Is the best ahead of the runner-up by more than the sweep's own launch noise? The real sweep loop,
store and Optuna study with scripted launches (each configuration's repeats read a set factor off its
first reading), then `tuner show` as a user runs it."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

from core.types import Config
from tests.conftest import FIXTURES
from tests.scripted import scripted_sweep
from tests.tuner.test_confirm import first_value
from tuner.lead import LeadVerdict, lead
from tuner.results import SweepResults
from tuner.sweep_state import SweepOptions


def sweep(tmp_path: Path, confirm: int, repeat_factor: float) -> SweepResults:
    """12 launches of the e2e space, ``--confirm confirm``; every repeat reads ``repeat_factor`` x the
    configuration's first reading."""
    def script(config: Config, before: int) -> float:
        return first_value(config) * (repeat_factor if before else 1.0)

    opts = SweepOptions(space_path=str(FIXTURES / "e2e-space.yaml"), db_path=str(tmp_path / "t.db"), budget=12,
                        confirm=confirm, seed=0)
    results, _ = scripted_sweep(opts, script, io.StringIO())
    return results


def show(tmp_path: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "tuner.cli", "show", "--db", str(tmp_path / "t.db"), *args],
                          capture_output=True, text=True, timeout=120, env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_without_a_repeat_the_noise_is_unknown_and_show_says_how_to_measure_it(tmp_path: Path) -> None:
    results = sweep(tmp_path, confirm=0, repeat_factor=1.0)
    found = lead(results)
    first, second = results.measured()[:2]
    assert found is not None and (found.best, found.runner_up) == (first.trial_number, second.trial_number)
    assert math.isclose(found.margin, results.score(first) / results.score(second) - 1)
    assert found.noise is None and found.verdict is LeadVerdict.NOISE_UNKNOWN
    line = next(line for line in show(tmp_path).splitlines() if line.startswith("lead:"))
    assert f"trial {first.trial_number} is" in line and "--confirm 2" in line


def test_repeats_ten_percent_apart_leave_a_near_tie_within_the_noise(tmp_path: Path) -> None:
    results = sweep(tmp_path, confirm=3, repeat_factor=1.1)
    found = lead(results)
    assert found is not None and found.noise is not None
    assert found.margin < 0.05, "premise: the scripted landscape's two best are within 5%"
    assert found.noise.configurations == 3 and found.noise.readings == 6
    assert math.isclose(found.noise.sd, math.log(1.1) / math.sqrt(2))  # each pair's log sd, pooled
    assert found.verdict is LeadVerdict.WITHIN_NOISE
    shown = json.loads(show(tmp_path, "--json"))["lead"]
    assert shown["verdict"] == "within_noise" and shown["best"] == found.best
    assert math.isclose(shown["noise"]["sd"], found.noise.sd)


def test_repeats_that_agree_settle_the_same_lead(tmp_path: Path) -> None:
    results = sweep(tmp_path, confirm=3, repeat_factor=1.0001)
    found = lead(results)
    assert found is not None and found.noise is not None
    assert found.verdict is LeadVerdict.SETTLED, f"a {found.margin:.1%} lead against sd {found.noise.sd:.4%}"
    line = next(line for line in show(tmp_path).splitlines() if line.startswith("lead:"))
    assert "standard errors of the launch noise" in line
