"""`--profile-best`: after the budget, the best configuration is launched once more under SGLang's
profiler (here the simulated one, offline) and its top kernels reach show, show --json, the report and
the dashboard's attributes; the launch is not one of the budget's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna

from tuner.space_loader import load_space
from workers.profile import read_trace
from workers.sim.offline import OfflineModel

CLI = [sys.executable, "-m", "tuner.cli"]
SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "demo-sim.yaml"


def test_the_best_is_profiled_once_and_its_kernels_are_shown(tmp_path: Path) -> None:
    db = str(tmp_path / "p.db")
    sweep = subprocess.run([*CLI, "sweep", "--offline", "--space", str(SPACE), "--budget", "8", "--seed", "3",
                            "--db", db, "--profile-best"], capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    assert "where the best's GPU time goes" in sweep.stdout
    shown = json.loads(subprocess.run([*CLI, "show", "--json", "--db", db], capture_output=True, text=True,
                                      timeout=120).stdout)
    trials = {t["trial_number"]: t for t in shown["trials"]}
    best = shown["trials"][0]
    profiled = trials[shown["best_profile"]["trial_number"]]
    assert profiled["repeat_of"] == best["trial_number"] and profiled["config_key"] == best["config_key"]
    assert [t["trial_number"] for t in trials.values() if t["profile"]] == [profiled["trial_number"]]
    launched = [t for t in trials.values() if t["status"] in ("ok", "infeasible") and t["repeat_of"] is None]
    assert len(launched) == 8  # the profile run is not one of the budget's launches

    space = load_space(str(SPACE))
    model = OfflineModel(SPACE.parent / str(space.file.scenario))
    outcome = model.outcome(space.from_params(best["params"]) if best["params"] else space.baseline())
    heaviest = max(outcome.kernels, key=lambda kw: kw[1])
    top = shown["best_profile"]["kernels"][0]
    assert top["name"] == heaviest[0]
    assert abs(top["share"] - heaviest[1] / sum(w for _, w in outcome.kernels)) < 1e-6
    assert read_trace(Path(shown["best_profile"]["trace_path"])).kernels[0].name == heaviest[0]

    report = tmp_path / "r.html"
    assert subprocess.run([*CLI, "report", "--db", db, "-o", str(report)], timeout=120).returncode == 0
    assert heaviest[0] in report.read_text()
    study = optuna.load_study(study_name="demo-sim", storage=f"sqlite:///{db}")
    attrs = study.trials[profiled["trial_number"]].user_attrs["kernel_profile"]
    assert attrs[0].startswith(f"{heaviest[0]} ")
