"""After a real sweep: `tuner export`, `tuner report` and `tuner dashboard` on its database."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from db.store import Store
from tests.e2e.conftest import FIXTURES, run_tuner
from tuner.dashboard import make_dashboard, serve_in_thread
from tuner.export import server_options
from workers.sim.args import build_parser

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("outputs")
    for name in ("e2e-space.yaml", "e2e-scenario.yaml"):
        shutil.copy(FIXTURES / name, workdir / name)
    (workdir / "home").mkdir()
    proc = run_tuner(workdir, "sweep", "--space", "e2e-space.yaml", "--budget", "8", "--seed", "11")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return workdir


def test_exported_script_is_the_measured_command(swept: Path) -> None:
    proc = run_tuner(swept, "export", "-o", "launch.sh")
    assert proc.returncode == 0, proc.stderr
    script = (swept / "launch.sh").read_text()
    assert subprocess.run(["bash", "-n", str(swept / "launch.sh")]).returncode == 0
    shown = json.loads(run_tuner(swept, "show", "--json").stdout)["trials"][0]
    store = Store(swept / "tuner.db")
    try:
        sweep = store.sweep("e2e")
        assert sweep is not None
        best = store.run(sweep.id, shown["trial_number"])
        server_log = store.server_log(sweep.id, shown["trial_number"])
    finally:
        store.close()
    assert best is not None and best.status == "ok"
    assert f"trial {best.trial_number}" in script
    body = script.split("exec python3 -m sglang.launch_server \\\n", 1)[1]
    options = [tok for line in body.splitlines() for tok in line.strip().rstrip("\\").split()]
    assert options[:-1] == server_options(best.argv) and options[-1] == '"$@"'
    # ... and exactly what the server was started with (its own log), settings such as
    # --max-total-tokens included: nothing lost to redaction.
    assert "--max-total-tokens" in options and "<redacted>" not in script
    logged = re.search(r"server_args=ServerArgs\((.*)\)", server_log)
    assert logged is not None
    tuner_owned = ("host", "port", "sim_scenario")
    exported = {k: v for k, v in _server_args(options[:-1]).items() if k not in tuner_owned}
    assert exported == {k: v for k, v in _pairs(logged.group(1)).items() if k not in tuner_owned}


def _pairs(text: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=('[^']*'|\[[^\]]*\]|[^,]+)", text))


def _server_args(options: list[str]) -> dict[str, str]:
    """The ServerArgs line the simulated engine would log for these options (its own parser)."""
    namespace = build_parser("0.5.23").parse_args(options)
    return _pairs(", ".join(f"{k}={v!r}" for k, v in sorted(vars(namespace).items()) if v not in (None, False)))


def test_export_errors_are_one_line(swept: Path) -> None:
    missing = run_tuner(swept, "export", "--study", "nope")
    assert missing.returncode == 1 and missing.stderr.strip() == (
        "error: tuner.db: no study named 'nope' (studies: e2e)")
    nodb = run_tuner(swept, "export", "--db", "other.db")
    assert nodb.returncode == 2 and "no such database" in nodb.stderr and "Traceback" not in nodb.stderr


def test_report_is_self_contained(swept: Path) -> None:
    proc = run_tuner(swept, "report", "-o", "report.html")
    assert proc.returncode == 0, proc.stderr
    html = (swept / "report.html").read_text()
    for title in ("Optimization history", "Parameter importances", "Parallel coordinates",
                  "tok/s@C16 by quantization format x MoE backend", "Failures by kind", "Best vs baseline",
                  "Top five"):
        assert f"<h2>{title}</h2>" in html
    assert not re.search(r"<script[^>]*\bsrc=", html), "no external scripts: the report must open offline"
    assert not re.search(r"<link[^>]*\bhref=[\"']https?:", html)
    assert html.count("Plotly.newPlot") >= 5
    assert "python3 -m sglang.launch_server" in html


def test_dashboard_serves_trials_attributes_and_artifacts(swept: Path) -> None:
    server = make_dashboard(swept / "tuner.db", "127.0.0.1", 0)
    serve_in_thread(server)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        studies = httpx.get(f"{base}/api/studies").json()["study_summaries"]
        assert [s["study_name"] for s in studies] == ["e2e"]
        detail = httpx.get(f"{base}/api/studies/{studies[0]['study_id']}").json()
        trials = detail["trials"]
        assert len(trials) >= 8
        ok = [t for t in trials if any(a["key"] == "status" and a["value"] == "ok" for a in t["user_attrs"])]
        assert ok and all(any(a["key"] == "tok_s_c16" for a in t["user_attrs"]) for t in ok)
        art = ok[0]["artifacts"][0]
        got = httpx.get(f"{base}/artifacts/{studies[0]['study_id']}/{ok[0]['trial_id']}/{art['artifact_id']}")
        assert got.status_code == 200 and got.text
        assert httpx.get(f"{base}/dashboard").status_code == 200
    finally:
        server.shutdown()
        server.server_close()
