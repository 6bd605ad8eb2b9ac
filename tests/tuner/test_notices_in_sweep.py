"""SGLang's warnings reach the user: a real (offline) sweep of the demo space, whose scenario prints
"max_running_requests is set to 48" under MTP; `show --json` and the dashboard's attributes carry it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna

CLI = [sys.executable, "-m", "tuner.cli"]
SPACE = str(Path(__file__).resolve().parents[2] / "search_spaces" / "demo-sim.yaml")


def test_notices_are_in_show_json_and_the_dashboard_attributes(tmp_path: Path) -> None:
    db = str(tmp_path / "n.db")
    sweep = subprocess.run([*CLI, "sweep", "--offline", "--space", SPACE, "--budget", "12", "--seed", "1", "--db", db],
                           capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    trials = json.loads(subprocess.run([*CLI, "show", "--json", "--db", db], capture_output=True, text=True,
                                       timeout=120).stdout)["trials"]
    launched_mtp = {t["trial_number"] for t in trials if t["params"].get("speculative") == "mtp"
                    and t["status"] in ("ok", "infeasible") and t["cached_from"] is None}
    capped = {t["trial_number"] for t in trials
              if any(n["kind"] == "max_running_requests capped" for n in t["sglang_notices"])}
    assert launched_mtp and capped == launched_mtp
    study = optuna.load_study(study_name="demo-sim", storage=f"sqlite:///{db}")
    attrs = {t.number: t.user_attrs.get("sglang_notices", []) for t in study.trials}
    assert all(any(a.startswith("max_running_requests capped: ") for a in attrs[n]) for n in launched_mtp)
    assert not any(attrs[n] for n in attrs if n not in capped and not any(
        n == t["trial_number"] and t["sglang_notices"] for t in trials))
