"""Exported launch scripts: quoting, bash round trip, SGLang parsing, secrets, other formats."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from core.errors import StudyError
from db.store import RunRow, SweepRow
from tuner.export import as_json, as_sglang_config, launch_script, pick_run, server_options
from tuner.results import SweepResults
from workers.sim.args import build_parser

HOSTILE = "it's \"quoted\" $(touch /tmp/pwned) `id` $HOME\nsecond line\ttab"


def _sweep() -> SweepRow:
    return SweepRow(id=1, study_name="s", space_path="/x.yaml", space_text="", engine="sglang",
                    sglang_version="0.5.23", gpu_name="RTX", gpu_arch="sm_120", gpu_count=8, driver="580",
                    hosts=["h"], budget=4, roofline_tok_s=None, time_scale=1.0, created_at=datetime.now())


def _run(argv: list[str], env: dict[str, str], n: int = 3, status: str = "ok", tok_s: float | None = 25.0) -> RunRow:
    return RunRow(id=n, trial_number=n, config_key="k", baseline=False, params={"a": 1}, flags={}, argv=argv,
                  env=env, status=status, failure_kind=None if status == "ok" else "oom", failure_reason="",
                  log_tail="", tok_s=tok_s, metrics={"concurrency": 16, "ttft_ms": {"p50": 300.0, "p99": 900.0},
                                                     "tpot_ms": {"p50": 30.0}},
                  gate={"passed": True}, startup_s=100.0, sglang_version="0.5.23", node="h", gpu_ids=["0"],
                  started_at=None, finished_at=None, cached_from=None)


ARGV = ["/venv/bin/python3", "-m", "sglang.launch_server", "--model-path", "/models/My Model (NVFP4)",
        "--served-model-name", HOSTILE, "--tp-size", "4", "--trust-remote-code", "--cuda-graph-bs-decode", "1",
        "2", "4", "--host", "127.0.0.1", "--port", "31234"]
ENV = {"NCCL_PROTO": "LL", "WEIRD": HOSTILE, "HF_TOKEN": "<redacted>", "SGLANG_SIM_SCENARIO": "/s.yaml"}


def _execute(script: str, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run the script with a fake python3 first on PATH that reports its argv and environment."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "python3"
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))\n")
    fake.chmod(0o755)
    path = tmp_path / "launch.sh"
    path.write_text(script)
    path.chmod(0o755)
    run_env = {"PATH": f"{bindir}:{os.environ['PATH']}", **(env or {})}
    out = subprocess.run([str(path), *extra], capture_output=True, text=True, env=run_env, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_script_round_trips_through_bash(tmp_path: Path) -> None:
    script = launch_script(_run(ARGV, ENV), _sweep())
    assert script.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    seen = _execute(script, tmp_path, "--port", "30001", env={"HF_TOKEN": "hf_real"})
    assert seen["argv"] == ["-m", "sglang.launch_server", *server_options(ARGV), "--port", "30001"]
    env = seen["env"]
    assert isinstance(env, dict)
    assert env["NCCL_PROTO"] == "LL" and env["WEIRD"] == HOSTILE and env["HF_TOKEN"] == "hf_real"
    assert "SGLANG_SIM_SCENARIO" not in env
    assert not Path("/tmp/pwned").exists()
    assert "# tok/s@C16: 25.00" in script and "TTFT p50/p99: 300.0 / 900.0 ms" in script


def test_redacted_secret_must_come_from_the_environment(tmp_path: Path) -> None:
    script = launch_script(_run(ARGV, ENV), _sweep())
    with pytest.raises(subprocess.CalledProcessError) as info:
        _execute(script, tmp_path)
    assert "set HF_TOKEN in your environment" in info.value.stderr
    assert "<redacted>" not in script.split("set -euo pipefail")[1]


def test_options_parse_with_sglang_0523_parser() -> None:
    ns = build_parser("0.5.23").parse_args(server_options(ARGV))
    assert ns.served_model_name == HOSTILE and ns.model_path == "/models/My Model (NVFP4)"
    assert ns.cuda_graph_bs_decode == [1, 2, 4] and ns.trust_remote_code and ns.tp_size == 4


def sglang_python() -> str:
    """A Python with SGLang: $TUNER_TEST_SGLANG_PYTHON, else this one if it imports sglang; else skip."""
    candidate = os.environ.get("TUNER_TEST_SGLANG_PYTHON", sys.executable)
    probe = subprocess.run([candidate, "-c", "import sglang.srt.server_args"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("SGLang is not installed (set TUNER_TEST_SGLANG_PYTHON to a Python that has it)")
    return candidate


PARSE_WITH_SGLANG = """
import json, sys
from sglang.srt.server_args import prepare_server_args
args = prepare_server_args(json.loads(sys.stdin.read()))
print(json.dumps({"served_model_name": args.served_model_name, "tp_size": args.tp_size,
                  "model_path": args.model_path}))
"""


def test_options_parse_with_real_sglang_when_installed(tmp_path: Path) -> None:
    python = sglang_python()
    script = launch_script(_run(ARGV, ENV), _sweep())
    options = _execute(script, tmp_path, env={"HF_TOKEN": "x"})["argv"][2:]  # what bash hands to SGLang
    out = subprocess.run([python, "-c", PARSE_WITH_SGLANG], input=json.dumps(options), capture_output=True,
                         text=True, check=True)
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    assert parsed == {"served_model_name": HOSTILE, "tp_size": 4, "model_path": "/models/My Model (NVFP4)"}


def test_json_and_sglang_config_yaml() -> None:
    data = json.loads(as_json(_run(ARGV, ENV), _sweep()))
    assert data["argv"][3:] == server_options(ARGV) and data["env"]["NCCL_PROTO"] == "LL"
    text = as_sglang_config(_run(ARGV, ENV), _sweep())
    cfg = yaml.safe_load(text)
    assert cfg["tp-size"] == 4 and cfg["trust-remote-code"] is True and cfg["served-model-name"] == HOSTILE
    assert "port" not in cfg and "cuda-graph-bs-decode" not in cfg  # --config cannot hold a list option ...
    assert config_arguments(text) == ["--cuda-graph-bs-decode", "1", "2", "4"]  # ... so it is an argument
    assert "#   export NCCL_PROTO=LL\n" in text and '#   export HF_TOKEN="${HF_TOKEN:?' in text
    exports = "\n".join(line.removeprefix("#   ") for line in text.splitlines() if line.startswith("#   export"))
    shown = subprocess.run(["bash", "-c", exports + '\nprintf %s "$WEIRD"'], capture_output=True, text=True,
                           env={"HF_TOKEN": "x"}, check=True)
    assert shown.stdout == HOSTILE  # the one-line comment form gives the exact value back


def config_arguments(text: str) -> list[str]:
    """The arguments the YAML export's header says to pass beside ``--config``."""
    lines = text.splitlines()
    return shlex.split(lines[1].removeprefix("#")) if lines[0].endswith("\\") else []


def test_config_values_keep_their_exact_text() -> None:
    argv = [*ARGV[:3], "--revision", "007", "--mem-fraction-static", "0.70", "--tp-size", "4",
            "--api-key", "<redacted>"]
    text = as_sglang_config(_run(argv, {}), _sweep())
    cfg = yaml.safe_load(text)
    assert cfg == {"revision": "007", "mem-fraction-static": "0.70", "tp-size": 4}
    assert config_arguments(text) == ["--api-key", "${API_KEY:?set API_KEY in your environment}"]


CONFIG_VS_ARGV = """
import dataclasses, json, sys
from sglang.srt.server_args import prepare_server_args
a, b = (prepare_server_args(argv) for argv in json.loads(sys.stdin.read()))
diff = {k: (v, getattr(b, k)) for k, v in vars(a).items() if not k.startswith("_") and v != getattr(b, k)}
print(json.dumps({"diff": diff, "tp_size": a.tp_size}, default=str))
"""


def test_sglang_config_file_gives_the_measured_arguments_to_real_sglang(tmp_path: Path) -> None:
    python = sglang_python()
    argv = [*ARGV, "--no-enable-tf32-matmul", "--mem-fraction-static", "0.7"]
    text = as_sglang_config(_run(argv, ENV), _sweep())
    (tmp_path / "best.yaml").write_text(text)
    via_config = ["--config", str(tmp_path / "best.yaml"), *config_arguments(text)]
    out = subprocess.run([python, "-c", CONFIG_VS_ARGV], input=json.dumps([server_options(argv), via_config]),
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    assert parsed == {"diff": {}, "tp_size": 4}


def test_pick_run_messages() -> None:
    runs = [_run(ARGV, ENV, n=1, status="infeasible", tok_s=None)]
    with pytest.raises(StudyError, match="no feasible trial"):
        pick_run(SweepResults(_sweep(), runs), None)
    with pytest.raises(StudyError, match="has no trial 7"):
        pick_run(SweepResults(_sweep(), runs), 7)
    more = [*runs, replace(_run(ARGV, ENV, n=2), config_key="k2"),
            replace(_run(ARGV, ENV, n=5, tok_s=30.0), config_key="k5")]
    assert pick_run(SweepResults(_sweep(), more), None).trial_number == 5


def test_confirmed_configurations_rank_by_their_median() -> None:
    a = replace(_run(ARGV, ENV, n=1, tok_s=30.0), config_key="a")
    b = replace(_run(ARGV, ENV, n=2, tok_s=29.0), config_key="b")
    a2 = replace(_run(ARGV, ENV, n=3, tok_s=26.0), config_key="a", repeat_of=1)
    b2 = replace(_run(ARGV, ENV, n=4, tok_s=29.5), config_key="b", repeat_of=2)
    results = SweepResults(_sweep(), [a, b, a2, b2])
    assert [r.trial_number for r in results.measured()] == [2, 1]
    assert results.score(a) == 28.0 and results.samples("b") == [29.0, 29.5]
    assert pick_run(results, None).trial_number == 2
    assert [r.trial_number for r in results.ranked()] == [2, 1, 3, 4]
    script = launch_script(b, _sweep(), samples=results.samples("b"))
    assert "median of 2 measurements: 29.00, 29.50" in script


def test_redacted_option_value_is_read_from_the_environment(tmp_path: Path) -> None:
    argv = [*ARGV[:3], "--speculative-num-draft-tokens", "4", "--api-key", "<redacted>", "--tp-size", "4"]
    script = launch_script(_run(argv, {}), _sweep())
    assert "'<redacted>'" not in script
    seen = _execute(script, tmp_path, env={"API_KEY": "sk-real"})
    assert seen["argv"] == ["-m", "sglang.launch_server", "--speculative-num-draft-tokens", "4", "--api-key",
                            "sk-real", "--tp-size", "4"]
    with pytest.raises(subprocess.CalledProcessError) as info:
        _execute(script, tmp_path)
    assert "set API_KEY in your environment" in info.value.stderr


def test_setting_redacted_by_an_older_version_is_a_clear_error() -> None:
    argv = [*ARGV[:3], "--speculative-num-draft-tokens", "<redacted>"]
    with pytest.raises(StudyError, match="--speculative-num-draft-tokens was redacted by an older sglang-tuner"):
        launch_script(_run(argv, {}), _sweep())
