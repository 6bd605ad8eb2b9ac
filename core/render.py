"""Render a configuration into the exact command line and environment for one SGLang version.

Rules: full option strings only (never argparse prefixes); booleans as bare flags (``False``
omits the flag, or uses its ``--no-`` form when SGLang has one); lists as nargs values; ``None``
omits the option; environment variables apart. Names are resolved through the version's flag
table, so ``cuda_graph_max_bs`` becomes ``--cuda-graph-max-bs`` before 0.5.23 and
``--cuda-graph-max-bs-decode`` from 0.5.23 on.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from core.flags import FlagTable
from core.redact import redact_argv, redact_env
from core.types import Config, EngineKind, EngineSpec, LaunchCommand


def render_args(flags: dict[str, Any], table: FlagTable) -> list[str]:
    """SGLang options for ``flags`` (dest names), validated against ``table``, in a stable order."""
    argv: list[str] = []
    for name, value in flags.items():
        flag = table.check_value(name, value)
        if value is None:
            continue
        if flag.kind == "bool":
            if value:
                argv.append(flag.option)
            elif flag.negation:
                argv.append(flag.negation)
            continue
        argv.append(flag.option)
        items = value if isinstance(value, list | tuple) else [value]
        argv.extend(_fmt(v) for v in items)
    return argv


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def render(config: Config, table: FlagTable, engine: EngineSpec,
           host: str | None = None, port: int | None = None) -> LaunchCommand:
    """The full launch: ``<python> -m <module> <options> [--host H --port P]`` plus env."""
    flags = dict(config.flags)
    if host is not None:
        flags["host"] = host
    if port is not None:
        flags["port"] = port
    argv = [engine.python, "-m", engine.module, *render_args(flags, table)]
    env = dict(config.env)
    if engine.kind == EngineKind.SIM and engine.scenario:
        env["SGLANG_SIM_SCENARIO"] = engine.scenario
    return LaunchCommand(argv=tuple(argv), env=env)


def shell_command(cmd: LaunchCommand) -> str:
    """A copy-pasteable shell line (env assignments, then the shell-quoted argv), secrets redacted."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in redact_env(cmd.env).items())
    return (env + " " if env else "") + shlex.join(redact_argv(cmd.argv))
