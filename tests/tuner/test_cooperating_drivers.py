"""Two `tuner sweep` processes on one database and study split the work: the baseline launched
once, the budget exact, no configuration launched twice, nothing left running."""

from __future__ import annotations

import collections
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import SPACES

CLI = [sys.executable, "-m", "tuner.cli"]


def test_two_drivers_on_one_study_split_the_budget(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    args = ["sweep", "--offline", "--space", str(SPACES / "hard-deepseek-v3-h200.yaml"), "--budget", "24",
            "--db", str(db), "--study", "shared"]
    drivers = [subprocess.Popen([*CLI, *args, "--seed", str(seed)], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    for d in drivers:
        out, err = d.communicate(timeout=300)
        assert d.returncode == 0, err + out
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT config_key, status, baseline, repeat_of, remeasure, trial_number "
                            "FROM tuner_trial_runs").fetchall()
        answered = conn.execute("SELECT argv, gpu_ids, node, cached_from FROM tuner_trial_runs "
                                "WHERE status = 'cached'").fetchall()
        owners = dict(conn.execute("SELECT t.number, a.value_json FROM trial_system_attributes a "
                                   "JOIN trials t ON t.trial_id = a.trial_id WHERE a.key = 'driver'").fetchall())
        states = dict(conn.execute("SELECT state, count(*) FROM trials GROUP BY state").fetchall())
        left = conn.execute("SELECT (SELECT count(*) FROM tuner_launch_claims), "
                            "(SELECT count(*) FROM tuner_drivers)").fetchone()
    launched = [r for r in runs if r[1] in ("ok", "infeasible") and (r[3] is None or r[4])]
    assert len(launched) == 24, "the budget is exact across drivers"
    assert sum(1 for r in launched if r[2]) == 1, "the baseline launched once"
    first_launches = collections.Counter(r[0] for r in launched if r[3] is None)
    assert max(first_launches.values()) == 1, "no configuration launched twice"
    assert len({owners[r[5]] for r in launched}) == 2, "both drivers launched"
    assert set(states) <= {"COMPLETE", "FAIL"} and left == (0, 0)
    assert answered, "each driver answered some proposals from the other's measurements"
    for argv, gpu_ids, node, cached_from in answered:  # not launched: no command line or GPUs of its own
        assert (argv, gpu_ids, node) == ("[]", "[]", "") and cached_from is not None
