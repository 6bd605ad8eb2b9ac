"""Rendering configurations to SGLang command lines, per version; flag-table introspection."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import pytest

from core.errors import ConfigError, FlagError
from core.flags import FlagTable, introspect
from core.redact import redact_env
from core.render import render, render_args, shell_command
from core.types import Config, EngineSpec
from tests.conftest import SPACES
from tuner.sampler import make_sampler
from tuner.space_loader import load_space

TABLE = FlagTable.bundled("0.5.23")
FAKE_054 = Path(__file__).resolve().parent.parent / "fixtures" / "fake_sglang_054"


def _all_options(table: FlagTable) -> dict[str, str]:
    out = {}
    for flag in table.flags.values():
        out[flag.option] = flag.dest
        if flag.negation:
            out[flag.negation] = flag.dest
    return out


@pytest.mark.parametrize("space_file", sorted(p.name for p in SPACES.glob("*.yaml")))
def test_many_sampled_configs_use_only_full_0523_options(space_file: str) -> None:
    space = load_space(SPACES / space_file, TABLE)
    options = _all_options(TABLE)
    study = optuna.create_study(sampler=make_sampler(space, seed=7, strategy="tpe"))
    engine = EngineSpec(kind="sglang", python="python3")
    for _ in range(150):
        trial = study.ask()
        config = space.sample(trial)
        argv = render(config, TABLE, engine, host="127.0.0.1", port=31000).argv
        assert argv[:3] == ("python3", "-m", "sglang.launch_server")
        i = 3
        while i < len(argv):
            opt = argv[i]
            assert opt in options, f"{opt} is not a full 0.5.23 option"
            flag = TABLE.flags[options[opt]]
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                if flag.choices:
                    assert argv[i] in flag.choices
                i += 1
        study.tell(trial, 1.0)


def test_cuda_graph_max_bs_follows_the_version() -> None:
    legacy = introspect_fake()
    assert render_args({"cuda_graph_max_bs": 32}, TABLE) == ["--cuda-graph-max-bs-decode", "32"]
    assert render_args({"cuda_graph_max_bs": 32}, legacy) == ["--cuda-graph-max-bs", "32"]
    # the new name written in a space also renders on the old version
    assert render_args({"cuda_graph_max_bs_decode": 16}, legacy) == ["--cuda-graph-max-bs", "16"]


def introspect_fake() -> FlagTable:
    import os

    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(FAKE_054) + (os.pathsep + env_path if env_path else "")
    try:
        return introspect(sys.executable)
    finally:
        os.environ["PYTHONPATH"] = env_path


def test_introspection_reads_the_installed_parser() -> None:
    table = introspect_fake()
    assert table.version == "0.5.4"
    assert table.flags["moe_runner_backend"].choices is not None
    assert "marlin" not in table.flags["moe_runner_backend"].choices
    with pytest.raises(FlagError, match="'marlin' is not a --moe-runner-backend of SGLang 0.5.4"):
        render_args({"moe_runner_backend": "marlin"}, table)


def test_introspection_without_sglang_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot introspect SGLang"):
        introspect(sys.executable)


def test_booleans_lists_and_none() -> None:
    argv = render_args({"trust_remote_code": True, "disable_radix_cache": False,
                        "cuda_graph_bs_decode": [1, 2, 4], "quantization": None,
                        "enable_tf32_matmul": False}, TABLE)
    assert argv == ["--trust-remote-code", "--cuda-graph-bs-decode", "1", "2", "4",
                    "--no-enable-tf32-matmul"]


def test_removed_flag_is_an_error_before_launch() -> None:
    with pytest.raises(FlagError, match="'enable_ep_moe' is not an option of SGLang 0.5.23"):
        render_args({"enable_ep_moe": True}, TABLE)


def test_secrets_are_redacted_in_shell_command() -> None:
    config = Config(params={}, flags={"model_path": "/m"}, env={"HF_TOKEN": "hf_abc", "NCCL_PROTO": "LL"})
    cmd = render(config, TABLE, EngineSpec())
    assert cmd.env["HF_TOKEN"] == "hf_abc"  # the server gets it
    line = shell_command(cmd)
    assert "hf_abc" not in line and "HF_TOKEN='<redacted>'" in line and "NCCL_PROTO=LL" in line
    assert redact_env({"MY_API_KEY": "x", "AWS_SECRET_ACCESS_KEY": "y", "A": "b"}) == {
        "MY_API_KEY": "<redacted>", "AWS_SECRET_ACCESS_KEY": "<redacted>", "A": "b"}


def test_real_sglang_parser_matches_the_bundled_table_and_accepts_rendered_configs() -> None:
    """With SGLang installed (TUNER_TEST_SGLANG_PYTHON): introspection == bundled table, and its own
    parser (prepare_server_args) accepts many rendered configurations of every bundled space."""
    import json
    import subprocess

    from tests.tuner.test_export import sglang_python

    python = sglang_python()
    table = introspect(python)
    assert table.version == "0.5.23"
    for dest, flag in TABLE.flags.items():
        real = table.flags[dest]
        assert (real.option, real.kind, sorted(real.choices or ())) == (flag.option, flag.kind,
                                                                       sorted(flag.choices or ()))
    argvs = []
    for space_file in sorted(SPACES.glob("*.yaml")):
        space = load_space(space_file, table)
        study = optuna.create_study(sampler=make_sampler(space, seed=1, strategy="tpe"))
        for _ in range(40):
            trial = study.ask()
            argvs.append(render_args(space.sample(trial).flags, table))
            study.tell(trial, 1.0)
    code = ("import json, sys\nfrom sglang.srt.server_args import prepare_server_args\n"
            "for argv in json.loads(sys.stdin.read()):\n    prepare_server_args(argv)\nprint('parsed', flush=True)\n")
    out = subprocess.run([python, "-c", code], input=json.dumps(argvs), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("parsed")


def test_introspection_is_cached_until_sglang_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    fake = tmp_path / "site"
    shutil.copytree(FAKE_054, fake)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", str(fake))
    first = introspect(sys.executable)
    again = introspect(sys.executable)
    assert "(cached)" not in first.source and again.source.endswith("(cached)")
    assert again.flags.keys() == first.flags.keys() and again.version == first.version
    args = fake / "sglang" / "srt" / "server_args.py"
    args.write_text(args.read_text() + "\n# upgraded\n")  # another SGLang: asked again
    assert "(cached)" not in introspect(sys.executable).source
