"""Keeping secrets out of the database, logs and exported scripts.

Secret are the values of environment variables named like ``*TOKEN*``, ``*KEY*``, ``*SECRET*`` or
``*PASSWORD*``, and of SGLang options that hold credentials: ``*api_key`` (``--api-key``,
``--admin-api-key``), ``*password*`` (``--ssl-keyfile-password``), ``*secret*`` and ``hf_token``-like
names. Options that merely mention tokens or keys (``--speculative-num-draft-tokens``,
``--tokenizer-path``, ``--ssl-keyfile``) are settings, not secrets, and are kept: an exported script
must reproduce them. Secrets are replaced by ``<redacted>``; the server itself gets the real values.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
SECRET_ENV = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
SECRET_OPTION = re.compile(r"api_key$|password|secret|(?:^|_)(?:hf|auth|access|bearer)_token$", re.IGNORECASE)


def is_secret_option(name: str) -> bool:
    """Whether an SGLang option holds a credential; ``name`` is a dest (``api_key``) or ``--api-key[=X]``."""
    dest = name.split("=", 1)[0].removeprefix("--").replace("-", "_")
    return bool(SECRET_OPTION.search(dest))


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """A copy with the values of secret variables hidden."""
    return {k: (REDACTED if SECRET_ENV.search(k) else v) for k, v in env.items()}


def redact_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """Settings (dest names) with secret values (``api_key`` ...) hidden."""
    return {k: (REDACTED if is_secret_option(k) and v is not None else v) for k, v in flags.items()}


def redact_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """argv with the values of secret options (``--api-key X``, ``--api-key=X``) hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if arg.startswith("--") and is_secret_option(arg):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
                continue
            hide_next = True
        out.append(arg)
    return out


def secret_values(argv: tuple[str, ...] | list[str], env: dict[str, str],
                  flags: dict[str, Any] | None = None) -> list[str]:
    """The secret strings (4+ characters) found in a launch, to scrub from free text."""
    hidden = [v for k, v in env.items() if SECRET_ENV.search(k) and v]
    hidden += [str(v) for k, v in (flags or {}).items() if is_secret_option(k) and v is not None]
    hidden += [a for a, r in zip(argv, redact_argv(argv), strict=True) if a != r]
    return sorted({h.split("=", 1)[-1] if h.startswith("--") else h for h in hidden if len(h) >= 4},
                  key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value replaced."""
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text
