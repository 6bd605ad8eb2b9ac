"""`tuner sweep --offline`: the real loop against the scenario's model, as a user runs it (a real
process, a real database), read back with `tuner show --json` like any other sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import SPACES

TUNER = [sys.executable, "-m", "tuner.cli"]


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*TUNER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _launches(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trials that launched a server: first launches and surprises measured again, not answers
    from the store."""
    return [t for t in trials if t["status"] in ("ok", "infeasible") and (t["repeat_of"] is None or t["remeasure"])]


def test_offline_sweep_records_like_any_sweep_and_learns_failures(tmp_path: Path) -> None:
    space = str(SPACES / "hard-deepseek-v3-h200.yaml")
    run = tuner("sweep", "--offline", "--space", space, "--budget", "25", "--seed", "3", "--db", "o.db",
                "--study", "off", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "offline (the scenario's model, no servers)" in run.stdout
    shown = json.loads(tuner("show", "--db", "o.db", "--study", "off", "--json", cwd=tmp_path).stdout)
    trials = shown["trials"]
    launched = _launches(trials)
    assert len(launched) == 25, "the budget counts launches; answers from the store and avoided ones are apart"
    assert all(t["tok_s"] > 0 for t in trials if t["status"] == "ok")
    assert any(t["status"] == "infeasible" for t in trials), "this space fails at about half its settings"
    assert shown["learned_rules"], "failures with settings in their log lines give rules"
    assert all(t["argv"][2] == "workers.sim" for t in launched), "the launch command is recorded as for a server"
    text = tuner("show", "--db", "o.db", "--study", "off", cwd=tmp_path).stdout
    assert "learned: " in text
    again = tuner("sweep", "--offline", "--space", space, "--budget", "30", "--seed", "3", "--db", "o.db",
                  "--study", "off", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "learned before: " in again.stdout, "a resumed sweep starts with the rules it had"
    resumed = json.loads(tuner("show", "--db", "o.db", "--study", "off", "--json", cwd=tmp_path).stdout)
    relaunched = _launches(resumed["trials"])
    keys = [t["config_key"] for t in relaunched if not t["remeasure"]]
    assert len(relaunched) == 30 and len(set(keys)) == len(keys), \
        "no configuration launched twice, but for a surprise measured again (which counts in the budget)"
    script = tuner("export", "--db", "o.db", "--study", "off", cwd=tmp_path)
    assert script.returncode == 0 and "-m sglang.launch_server" in script.stdout


def test_the_record_names_the_gpus_of_one_server_not_of_the_node(tmp_path: Path) -> None:
    run = tuner("sweep", "--offline", "--space", str(SPACES / "hard-llama-70b-h100.yaml"), "--budget", "3",
                "--db", "g.db", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    script = tuner("export", "--db", "g.db", cwd=tmp_path).stdout
    assert "# GPUs: 4 x NVIDIA H100 80GB HBM3" in script, "4 GPUs per trial on a node of 8"
