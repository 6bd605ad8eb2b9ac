"""Export a measured trial: an executable launch script, JSON, or the YAML SGLang's ``--config`` reads.

The script runs exactly the command that was measured (argv minus the tuner's own ``--host`` and
``--port``; pass yours as arguments: ``"$@"`` goes last), with every value shell-quoted. Redacted
secrets become required variables of the caller's environment (``${HF_TOKEN:?...}``).
"""

from __future__ import annotations

import json
import shlex
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from core.errors import ConfigError, StudyError
from core.flags import BUNDLED_VERSIONS, FlagTable
from core.redact import REDACTED, is_secret_option
from core.types import RunStatus
from db.store import RunRow, SweepRow
from tuner.results import SweepResults, load_results

TUNER_OWNED = ("--host", "--port")


def server_options(argv: list[str]) -> list[str]:
    """The SGLang options of a measured argv: drop ``python -m module`` and the tuner's host/port."""
    try:
        start = argv.index("-m") + 2
    except ValueError as exc:
        raise StudyError("the recorded command has no '-m <module>'; nothing to export") from exc
    out: list[str] = []
    args = argv[start:]
    i = 0
    while i < len(args):
        if args[i] in TUNER_OWNED:
            i += 2
            continue
        if args[i] == "--sim-scenario":
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def _group(options: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for arg in options:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def _from_environment(name: str) -> str:
    return f'"${{{name}:?set {name} in your environment}}"'


def _option_line(group: list[str], quote: Callable[[str], str] = shlex.quote) -> str:
    """One option and its values, shell-quoted; a redacted secret is read from the user's environment."""
    option, values = group[0], group[1:]
    if REDACTED not in values:
        return " ".join(quote(p) for p in group)
    if not is_secret_option(option):
        raise StudyError(f"the recorded value of {option} was redacted by an older sglang-tuner; "
                         "it cannot be exported (run that configuration again to record it)")
    variable = option.removeprefix("--").replace("-", "_").upper()
    return " ".join([quote(option), *(_from_environment(variable) if v == REDACTED else quote(v) for v in values)])


def _env_line(name: str, value: str, quote: Callable[[str], str] = shlex.quote) -> str:
    if value == REDACTED:
        return f"export {name}={_from_environment(name)}"
    return f"export {name}={quote(value)}"


def launch_env(run: RunRow) -> dict[str, str]:
    """The env the script sets (the simulator's own variables left out)."""
    return {k: v for k, v in run.env.items() if not k.startswith("SGLANG_SIM_")}


def _fmt(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def launch_script(run: RunRow, sweep: SweepRow, python: str = "python3", samples: list[float] | None = None) -> str:
    """An executable bash script that launches the measured configuration.

    ``samples``: every tok/s@C16 measured for this configuration (confirmations), if more than one.
    """
    m = run.metrics or {}
    ttft, tpot = m.get("ttft_ms") or {}, m.get("tpot_ms") or {}
    gate = "passed" if run.gate and run.gate.get("passed") else ("failed" if run.gate else "not run")
    tok_s = statistics.median(samples) if samples and len(samples) > 1 else run.tok_s
    header = [
        "#!/usr/bin/env bash",
        f"# sglang-tuner: study {sweep.study_name}, trial {run.trial_number}"
        + (" (baseline)" if run.baseline else ""),
        f"# tok/s@C{m.get('concurrency', 16)}: {_fmt(tok_s, 2)}"
        + (f" measured on the simulator (x{sweep.time_scale:g}): {tok_s / sweep.time_scale:.2f} modelled"
           if sweep.engine == "sim" and tok_s else "")
        + (f" (median of {len(samples)} measurements: {', '.join(f'{v:.2f}' for v in samples)})"
           if samples and len(samples) > 1 else ""),
        *([f"# status: {run.status} ({run.failure_kind}): {run.failure_reason[:200]}".replace("\n", " ")]
          if run.status != RunStatus.OK else []),
        f"# TTFT p50/p99: {_fmt(ttft.get('p50'))} / {_fmt(ttft.get('p99'))} ms   TPOT p50: "
        f"{_fmt(tpot.get('p50'), 2)} ms   gate: {gate}",
        *([f"# SGLang ran it with {', '.join(f'{k}={v}' for k, v in run.ran_as.items())} (its /server_info): "
           "the command below asks otherwise to no effect"] if run.ran_as else []),
        f"# GPUs: {sweep.gpu_count} x {sweep.gpu_name} ({sweep.gpu_arch or '?'}, driver {sweep.driver})",
        f"# SGLang {run.sglang_version or sweep.sglang_version}; space {sweep.space_path}; "
        f"exported {datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        "# Add --host/--port (or any option) as arguments: ./launch.sh --host 0.0.0.0 --port 30000",
        "set -euo pipefail",
        "",
    ]
    env = [_env_line(k, v) for k, v in launch_env(run).items()]
    lines = [f"exec {shlex.quote(python)} -m sglang.launch_server \\"]
    lines += [f"  {_option_line(group)} \\" for group in _group(server_options(run.argv))]
    lines.append('  "$@"')
    return "\n".join(header + env + ([""] if env else []) + lines) + "\n"


def as_json(run: RunRow, sweep: SweepRow) -> str:
    """argv, env and metrics as JSON."""
    return json.dumps({"study": sweep.study_name, "trial": run.trial_number, "tok_s": run.tok_s,
                       "argv": ["python3", "-m", "sglang.launch_server", *server_options(run.argv)],
                       "env": launch_env(run), "sglang_version": run.sglang_version, "metrics": run.metrics,
                       "gate": run.gate, "params": run.params}, indent=2, default=str)


def _typed(value: str) -> int | float | str:
    """An int or float when that is lossless (``4``, ``0.7``), else the string (``007``, ``1e3``)."""
    for cast in (int, float):
        try:
            typed = cast(value)
        except ValueError:
            continue
        if str(typed) == value:
            return typed
    return value


def _one_line_word(value: str) -> str:
    """``value`` as one shell word on one line: shell-quoted, or in bash's ``$'...'`` form (escapes
    for line breaks, tabs, quotes and backslashes) when it holds control characters."""
    if not any(ch < " " for ch in value):
        return shlex.quote(value)
    escaped = "".join({"\\": "\\\\", "'": "\\'"}.get(ch) or (ch if ch >= " " else f"\\x{ord(ch):02x}")
                      for ch in value)
    return f"$'{escaped}'"


def _config_expressible(option: str, values: list[str], table: FlagTable | None) -> bool:
    """Whether SGLang's ``--config`` reader can hold this option: it takes store-true flags and
    single-value options, not lists (``nargs='+'``) nor ``--flag/--no-flag`` pairs."""
    flag = table.by_option(option) if table else None
    if flag is None:  # unknown version: judge by the shape of the recorded argv
        return len(values) == 1 or (not values and not option.startswith("--no-"))
    if flag.kind == "list":
        return False
    if flag.kind == "bool":
        return flag.negation is None
    return len(values) == 1


def as_sglang_config(run: RunRow, sweep: SweepRow | None = None) -> str:
    """YAML for SGLang's ``--config`` option: option names without dashes, values typed losslessly.

    Options ``--config`` cannot hold (lists, ``--no-`` flags, secrets) are listed in a header comment
    as the arguments to pass beside it, and the environment variables as ``export`` lines; together
    they give exactly the measured command.
    """
    version = run.sglang_version or (sweep.sglang_version if sweep else None)
    table = FlagTable.bundled(version) if version in BUNDLED_VERSIONS else None
    data: dict[str, Any] = {}
    extra: list[list[str]] = []
    for group in _group(server_options(run.argv)):
        option, values = group[0], group[1:]
        if REDACTED in values or not _config_expressible(option, values, table):
            extra.append(group)
            continue
        data[option.removeprefix("--")] = True if not values else _typed(values[0])
    header = [f"# sglang-tuner: trial {run.trial_number}" + (f" of study {sweep.study_name}" if sweep else "")
              + f", SGLang {version or '?'}: python3 -m sglang.launch_server --config THIS_FILE"
              + (" \\" if extra else "")]
    if extra:
        header.append(f"#     {' '.join(_option_line(group, _one_line_word) for group in extra)}")
        header.append("# (list options, --no- flags and secrets are not in the file: pass them as arguments)")
    env = launch_env(run)
    if env:
        header.append("# in this environment (SGLang's --config does not set environment variables):")
        header += [f"#   {_env_line(k, v, _one_line_word)}" for k, v in env.items()]
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False)


def pick_run(results: SweepResults, trial: int | None) -> RunRow:
    """The run to export: ``trial`` if given, else the best measured configuration (by median)."""
    study = results.sweep.study_name
    if trial is not None:
        run = next((r for r in results.runs if r.trial_number == trial), None)
        if run is None:
            raise StudyError(f"study {study!r} has no trial {trial}")
        if not run.argv:
            raise StudyError(f"trial {trial} of {study!r} was never launched ({run.status}); nothing to export")
        return run
    best = results.best()
    if best is None:
        raise StudyError(f"study {study!r} has no feasible trial yet; see `tuner show --study {study}`")
    return best


def export_text(db_path: str | Path, study: str | None, trial: int | None, fmt: str,
                pick: str | None = None) -> str:
    """What `tuner export` writes: trial ``trial``, the fastest meeting ``pick``, or the best."""
    from tuner.pareto import pick as pick_by_rule

    if fmt not in ("sh", "json", "yaml"):
        raise ConfigError(f"--format {fmt!r}: use sh, json or yaml")
    if pick is not None and trial is not None:
        raise ConfigError("--pick and --trial: give one of them")
    results = load_results(db_path, study)
    run = pick_by_rule(results, pick) if pick is not None else pick_run(results, trial)
    if fmt == "json":
        return as_json(run, results.sweep) + "\n"
    if fmt == "yaml":
        return as_sglang_config(run, results.sweep)
    return launch_script(run, results.sweep, samples=results.samples(run.config_key))


def write_output(path: Path, text: str, mode: int | None = None) -> None:
    """Write a product file; ConfigError naming ``-o`` when the path cannot take it."""
    try:
        path.write_text(text, encoding="utf-8")
        if mode is not None:
            path.chmod(mode)
    except OSError as exc:
        raise ConfigError(f"-o {path}: cannot write: {exc.strerror}") from exc
