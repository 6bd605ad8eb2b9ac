"""`tuner sweep` end to end: real CLI, real Ray (local, fake GPUs), real SQLite, simulated SGLang."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from db.store import RunRow
from tests.conftest import wait_for
from tests.e2e.conftest import TUNER, our_servers, run_tuner, stored_runs, tuner_env

pytestmark = pytest.mark.e2e


def _runs(workdir: Path, study: str = "e2e") -> list[RunRow]:
    return stored_runs(workdir / "tuner.db", study)


def test_sweep_two_groups_records_everything(workdir: Path) -> None:
    proc = run_tuner(workdir, "sweep", "--space", "e2e-space.yaml", "--budget", "10", "--seed", "3",
                     "--confirm", "1")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "best: trial" in proc.stdout
    runs = _runs(workdir)
    confirmations = [r for r in runs if r.repeat_of is not None]
    assert confirmations and all(c.status == "ok" for c in confirmations)
    for c in confirmations:  # each confirms a different configuration, with the same configuration
        assert next(r for r in runs if r.trial_number == c.repeat_of).config_key == c.config_key
    assert len({c.config_key for c in confirmations}) == len(confirmations)
    # however the second measurement reorders the leaders, the winner was measured twice
    best_line = next(line for line in proc.stdout.splitlines() if line.startswith("best: trial"))
    assert "median of 2" in best_line, proc.stdout
    launched = [r for r in runs if r.status in ("ok", "infeasible") and r.repeat_of is None]
    assert len(launched) == 10
    assert len({r.config_key for r in launched}) == 10, "no configuration launched twice (but to confirm)"
    assert runs[0].baseline and runs[0].params == {}
    # two groups ran trials at the same time
    spans = sorted((r.started_at, r.finished_at, tuple(r.gpu_ids)) for r in launched)
    assert any(a[1] > b[0] and a[2] != b[2] for a, b in itertools.pairwise(spans))
    assert {tuple(r.gpu_ids) for r in launched} == {("0", "1"), ("2", "3")}
    for r in runs:
        if r.status == "infeasible":
            assert r.failure_kind and r.failure_reason
            if r.failure_kind == "oom":
                assert "OutOfMemoryError" in r.log_tail
        if r.status == "ok":
            assert r.tok_s and r.metrics and r.gate and r.gate["passed"]
    # Optuna: values, infeasible as COMPLETE with a violated constraint, attributes attached
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{workdir / 'tuner.db'}")
    states = {t.number: t for t in study.trials}
    for r in runs:
        t = states[r.trial_number]
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.user_attrs["status"] == r.status
        if r.status == "infeasible":
            assert t.constraints["failed"] == 1.0 and t.system_attrs["constraints"] == [1.0]
    assert study.best_trial.user_attrs["status"] in ("ok", "cached")
    shown = run_tuner(workdir, "show", "--json")
    assert shown.returncode == 0
    rows = json.loads(shown.stdout)["trials"]
    medians = [statistics.median(row["tok_s_samples"]) for row in rows if row["tok_s_samples"]]
    assert medians[0] == max(medians), "tuner show ranks configurations by their median tok/s"
    table = run_tuner(workdir, "show")
    assert "infeasible" in table.stdout or all(r.status == "ok" for r in runs)
    assert not our_servers(workdir)


def test_sigkill_mid_sweep_then_resume(workdir: Path) -> None:
    env = tuner_env(workdir)
    args = [*TUNER, "sweep", "--space", "e2e-space.yaml", "--budget", "8", "--seed", "5"]
    driver = subprocess.Popen(args, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (workdir / "tuner.db").exists() and len(our_servers(workdir)) >= 1, 120,
                 "a server to be running")
        wait_for(lambda: _count_launched(workdir) >= 2 and our_servers(workdir), 120,
                 "two finished trials and a running server")
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
    wait_for(lambda: not our_servers(workdir), 30, "every server to be gone after SIGKILL")
    before = {r.trial_number: r for r in _runs(workdir) if r.status in ("ok", "infeasible")}
    again = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr + again.stdout
    runs = _runs(workdir)
    launched = [r for r in runs if r.status in ("ok", "infeasible")]
    assert len(launched) == 8
    assert len({r.config_key for r in launched}) == 8
    after = {r.trial_number: r for r in launched}
    for number, run in before.items():  # nothing finished was lost or changed
        assert after[number].tok_s == run.tok_s and after[number].config_key == run.config_key
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{workdir / 'tuner.db'}")
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    assert not our_servers(workdir)
    third = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0 and "already has 8 finished trials (--budget 8): nothing to launch" in third.stdout
    assert [(r.trial_number, r.status) for r in _runs(workdir)] == [(r.trial_number, r.status) for r in runs]


def _count_launched(workdir: Path) -> int:
    try:
        with contextlib.closing(sqlite3.connect(workdir / "tuner.db", timeout=5)) as conn:
            row = conn.execute("SELECT count(*) FROM tuner_trial_runs WHERE status IN ('ok','infeasible')")
            return int(row.fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGINT] * 3, [signal.SIGTERM]],
                         ids=["ctrl-c", "ctrl-c-three-times", "sigterm"])
def test_interrupt_stops_servers_records_trials_in_flight_and_exits_130(workdir: Path, signals: list[int]) -> None:
    args = [*TUNER, "sweep", "--space", "e2e-space.yaml", "--budget", "30"]
    driver = subprocess.Popen(args, cwd=workdir, env=tuner_env(workdir), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        servers = wait_for(lambda: our_servers(workdir), 120, "a server to be running")
        # Ray starts workers at niceness 15; servers must not inherit it (other work would starve them)
        assert [s.nice() for s in servers] == [0] * len(servers)
        t0 = time.monotonic()
        for signum in signals:  # pressed fast: the later ones must not cut the shutdown short
            driver.send_signal(signum)
            time.sleep(0.05)
        _, err = driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err
    assert not our_servers(workdir)
    assert time.monotonic() - t0 < 60
    runs = _runs(workdir)
    assert all(r.status != "running" for r in runs)
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{workdir / 'tuner.db'}")
    assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING,))


def test_a_node_without_sglang_stops_the_sweep_instead_of_burning_it(workdir: Path) -> None:
    space = workdir / "real.yaml"
    space.write_text("name: real\nengine: sglang\nsglang_version: '0.5.23'\nsglang_python: "
                     f"{sys.executable}\ngpus_per_trial: 2\nstartup_timeout_s: 30\n"
                     "base: {model_path: /m, tp_size: 2}\n"  # EP 2 needs TP 2 (SGLang refuses it otherwise)
                     "params:\n  ep_size: {choices: [1, 2]}\n  cuda_graph_max_bs: {choices: [8, 16, 32]}\n")
    proc = run_tuner(workdir, "sweep", "--space", "real.yaml", "--budget", "5", "--gpus", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "trials in a row failed for reasons of the nodes" in proc.stderr
    assert "No module named 'sglang'" in proc.stderr
    runs = _runs(workdir, "real")
    assert runs and all(r.status == "failed" and r.failure_kind == "infrastructure" for r in runs)
    assert len(runs) <= 8



def test_a_lost_actor_is_an_infrastructure_failure_requeued_once(workdir: Path) -> None:
    args = [*TUNER, "sweep", "--space", "e2e-space.yaml", "--budget", "6", "--seed", "9"]
    driver = subprocess.Popen(args, cwd=workdir, env=tuner_env(workdir), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        server = wait_for(lambda: next(iter(our_servers(workdir)), None), 120, "a server to be running")
        actor = server.parent()  # the GPU-group actor that launched it
        assert actor is not None
        actor.kill()  # SIGKILL, by PID
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, out + err
    runs = _runs(workdir)
    lost = [r for r in runs if r.failure_kind == "infrastructure"]
    assert len(lost) == 1 and lost[0].status == "failed" and "actor lost" in lost[0].failure_reason
    retried = [r for r in runs if r.trial_number != lost[0].trial_number and r.params == lost[0].params
               and r.status in ("ok", "infeasible")]
    assert retried, "the lost trial's configuration was run again"
    assert len([r for r in runs if r.status in ("ok", "infeasible")]) == 6
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{workdir / 'tuner.db'}")
    assert study.trials[lost[0].trial_number].state == optuna.trial.TrialState.FAIL
    assert not our_servers(workdir)


def test_a_small_space_is_exhausted_then_its_best_confirmed(workdir: Path) -> None:
    space = workdir / "tiny.yaml"
    space.write_text((workdir / "e2e-space.yaml").read_text().replace("name: e2e", "name: tiny").split(
        "params:")[0] + "params:\n  checkpoint:\n    choices:\n      slow: {model_path: /m/slow}\n"
                        "      fast: {model_path: /m/fast}\n" + "benchmark:" +
                    (workdir / "e2e-space.yaml").read_text().split("benchmark:")[1])
    proc = run_tuner(workdir, "sweep", "--space", "tiny.yaml", "--budget", "10", "--confirm", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "search space exhausted after 2 distinct configurations" in proc.stdout
    runs = _runs(workdir, "tiny")
    launched = [r for r in runs if r.status in ("ok", "infeasible") and r.repeat_of is None]
    assert len(launched) == 2 and len({r.config_key for r in launched}) == 2
    assert len([r for r in runs if r.repeat_of is not None]) == 1
