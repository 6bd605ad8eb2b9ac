"""Secrets are hidden; settings that merely mention tokens or keys are kept (an export must reproduce them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.redact import REDACTED, is_secret_option, redact_argv, redact_flags, scrub, secret_values

FLAG_TABLE = Path(__file__).resolve().parents[2] / "core" / "flag_tables" / "sglang-0.5.23.json"


def test_the_credential_options_of_sglang_0523_are_exactly_the_secret_ones() -> None:
    dests = [o["dest"] for o in json.loads(FLAG_TABLE.read_text())["options"]]
    assert "speculative_num_draft_tokens" in dests and "tokenizer_path" in dests and "ssl_keyfile" in dests
    assert sorted(d for d in dests if is_secret_option(d)) == ["admin_api_key", "api_key", "ssl_keyfile_password"]


@pytest.mark.parametrize("name", ["--api-key", "--admin-api-key=x", "api_key", "hf_token", "--ssl-keyfile-password"])
def test_secret_option_names(name: str) -> None:
    assert is_secret_option(name)


@pytest.mark.parametrize("name", ["--speculative-num-draft-tokens", "--max-total-tokens", "--tokenizer-path",
                                  "--ssl-keyfile", "bucket_time_to_first_token", "--skip-tokenizer-init"])
def test_settings_that_mention_tokens_or_keys_are_not_secrets(name: str) -> None:
    assert not is_secret_option(name)


def test_argv_keeps_settings_and_hides_secrets() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--speculative-num-draft-tokens", "4", "--api-key", "sk-abcd",
            "--admin-api-key=sk-admin", "--tokenizer-path", "/models/tok", "--max-total-tokens", "200000"]
    assert redact_argv(argv) == ["python3", "-m", "sglang.launch_server", "--speculative-num-draft-tokens", "4",
                                 "--api-key", REDACTED, f"--admin-api-key={REDACTED}", "--tokenizer-path",
                                 "/models/tok", "--max-total-tokens", "200000"]
    flags = {"speculative_num_draft_tokens": 4, "api_key": "sk-abcd", "tokenizer_path": "/models/tok"}
    assert redact_flags(flags) == {**flags, "api_key": REDACTED}


def test_only_secret_values_are_scrubbed_from_logs() -> None:
    argv = ["python3", "-m", "m", "--tokenizer-path", "/models/tok", "--api-key", "sk-abcd", "--max-total-tokens",
            "200000"]
    env = {"HF_TOKEN": "hf_secret", "NCCL_PROTO": "LL"}
    log = "tokenizer_path='/models/tok' max_total_tokens=200000 api_key='sk-abcd' HF hf_secret proto LL"
    assert scrub(log, secret_values(argv, env)) == (
        f"tokenizer_path='/models/tok' max_total_tokens=200000 api_key='{REDACTED}' HF {REDACTED} proto LL")
