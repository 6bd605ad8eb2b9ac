"""The trade-off between tok/s@C16 and TTFT p99: the front `show` lists, and `export --pick` choosing a
point by a stated rule; on a real offline sweep of the demo space (its scenario models TTFT per setting)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CLI = [sys.executable, "-m", "tuner.cli"]
SPACE = str(Path(__file__).resolve().parents[2] / "search_spaces" / "demo-sim.yaml")


def _tuner(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    db = str(tmp_path_factory.mktemp("pareto") / "p.db")
    proc = _tuner("sweep", "--offline", "--space", SPACE, "--budget", "16", "--seed", "3", "--db", db)
    assert proc.returncode == 0, proc.stderr
    shown = _tuner("show", "--json", "--db", db)
    assert shown.returncode == 0, shown.stderr
    return db, json.loads(shown.stdout)


def _measured(data: dict[str, Any]) -> dict[int, tuple[float, float]]:
    """trial -> (median tok/s, TTFT p99) of each measured configuration (first runs)."""
    out = {}
    for t in data["trials"]:
        if t["status"] == "ok" and t["repeat_of"] is None:
            samples = sorted(t["tok_s_samples"])
            out[t["trial_number"]] = (samples[len(samples) // 2] if len(samples) % 2 else
                                      sum(samples[len(samples) // 2 - 1:len(samples) // 2 + 1]) / 2,
                                      t["metrics"]["ttft_ms"]["p99"])
    return out


def test_the_front_is_exactly_the_undominated_configurations(swept: tuple[str, dict[str, Any]]) -> None:
    _, data = swept
    measured = _measured(data)

    def dominated(n: int) -> bool:
        tok, ttft = measured[n]
        return any(o != n and t >= tok and w <= ttft and (t, w) != (tok, ttft) for o, (t, w) in measured.items())

    front = [p["trial_number"] for p in data["pareto_front"]]
    assert len(front) >= 2, "the demo's TTFT differs by setting: a trade-off is expected"
    assert set(front) == {n for n in measured if not dominated(n)}
    assert [measured[n][0] for n in front] == sorted((measured[n][0] for n in front), reverse=True)


def test_export_pick_takes_the_fastest_that_meets_the_rule(swept: tuple[str, dict[str, Any]],
                                                           tmp_path: Path) -> None:
    db, data = swept
    measured = _measured(data)
    limit = data["pareto_front"][-1]["ttft_p99_ms"]  # the quickest point's TTFT: only part of the front meets it
    proc = _tuner("export", "--db", db, "--pick", f"ttft_p99<={limit}ms", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    meeting = [n for n, (_, ttft) in measured.items() if ttft <= limit]
    expected = max(meeting, key=lambda n: measured[n][0])
    assert json.loads(proc.stdout)["trial"] == expected
    best = _tuner("export", "--db", db, "--format", "json")
    assert json.loads(best.stdout)["trial"] == data["pareto_front"][0]["trial_number"]


def test_a_rule_nothing_meets_says_what_came_closest(swept: tuple[str, dict[str, Any]]) -> None:
    db, data = swept
    lowest = min(ttft for _, ttft in _measured(data).values())
    proc = _tuner("export", "--db", db, "--pick", "ttft_p99<0.001ms")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and f"lowest ttft_p99 {lowest:.4g}" in proc.stderr, proc.stderr
    both = _tuner("export", "--db", db, "--pick", "ttft_p99<1s", "--trial", "1")
    assert both.returncode == 2 and "give one of them" in both.stderr


def test_the_dashboard_shows_the_front_on_the_study(swept: tuple[str, dict[str, Any]]) -> None:
    import optuna

    db, data = swept
    study = optuna.load_study(study_name=data["study"], storage=f"sqlite:///{db}")
    lines = study.user_attrs["pareto_front"]
    assert [int(line.split(":")[0].removeprefix("trial ")) for line in lines] == \
        [p["trial_number"] for p in data["pareto_front"]]
    assert all("tok/s@C16, TTFT p99" in line for line in lines)


def test_front_at_measures_the_front_at_other_concurrencies(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    proc = _tuner("sweep", "--offline", "--space", SPACE, "--budget", "12", "--seed", "1", "--db", db,
                  "--front-at", "1,4,64")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(_tuner("show", "--json", "--db", db).stdout)
    front = {p["trial_number"] for p in data["pareto_front"]}
    curves = {t["repeat_of"]: t["curve"] for t in data["trials"] if t["curve"]}
    assert set(curves) == front  # one more launch of each point of the front, nothing else
    for curve in curves.values():
        assert [b["concurrency"] for b in curve] == [1, 4, 64]
        assert [b["tok_s"] for b in curve] == sorted(b["tok_s"] for b in curve)  # more streams, more tok/s
        assert curve[0]["per_user_tok_s"] > curve[-1]["per_user_tok_s"]  # ... and less for each
    assert "at other concurrencies: C1 " in proc.stdout
    launched = [t for t in data["trials"] if t["status"] in ("ok", "infeasible") and t["repeat_of"] is None]
    assert len(launched) == 12
    report = tmp_path / "r.html"
    assert _tuner("report", "--db", db, "-o", str(report)).returncode == 0
    assert "at other concurrencies" in report.read_text() and "not measured (tuner sweep --front-at" not in \
        report.read_text()
