"""SGLang's launch options for one version: option strings, kinds and allowed values.

A :class:`FlagTable` comes from the SGLang installed where the server runs (its argparse parser is
introspected by :data:`INTROSPECT_SCRIPT` run with that Python), or from a table bundled for a
known version (``core/flag_tables/sglang-<version>.json``). Settings use SGLang's own *dest*
names (``cuda_graph_max_bs``); :meth:`FlagTable.resolve` maps a name to the option of this
version, following the renames of :data:`RENAMES` in either direction.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from core.errors import ConfigError, FlagError

FlagKind = Literal["bool", "value", "list"]

# Logical name -> the name it has in newer SGLang (0.5.23 renamed these; see reference §1.3).
RENAMES: dict[str, str] = {
    "cuda_graph_max_bs": "cuda_graph_max_bs_decode",
    "cuda_graph_bs": "cuda_graph_bs_decode",
}


def spellings(name: str) -> tuple[str, ...]:
    """``name`` and the names the same option has in other SGLang versions (:data:`RENAMES`, either
    direction): ``cuda_graph_max_bs`` is also ``cuda_graph_max_bs_decode``."""
    return (name, *(new for old, new in RENAMES.items() if old == name),
            *(old for old, new in RENAMES.items() if new == name))


def same_value(asked: Any, reported: Any) -> bool:
    """Does a server's reported option value say what was asked (numbers by value, else by text)?"""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (asked, reported))
    return float(asked) == float(reported) if numbers else str(asked).lower() == str(reported).lower()


def ran_otherwise(flags: dict[str, Any], reported: dict[str, Any]) -> dict[str, Any]:
    """The settings of ``flags`` (dest -> value asked) that a server reports (``/server_info``: dest ->
    value run) otherwise than asked, as it reports them. A setting counts only where the server
    reports it, not as None, under none of its spellings with the asked value: a deprecated alias the
    server keeps beside the new name does not make a difference."""
    out: dict[str, Any] = {}
    for dest, asked in flags.items():
        said = [reported[name] for name in spellings(dest) if reported.get(name) is not None]
        if said and not any(same_value(asked, value) for value in said):
            out[dest] = said[0]
    return out


# Values SGLang accepts only after parsing (no argparse choices), checked before any launch.
KNOWN_VALUES: dict[str, tuple[str, ...]] = {
    "speculative_algorithm": (
        "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO",
    ),
}

BUNDLED_VERSIONS = ("0.5.23", "0.5.17")  # core/flag_tables/sglang-<version>.json (0.5.17: the newest on torch 2.11)
DEFAULT_VERSION = "0.5.23"


@dataclass(frozen=True)
class Flag:
    """One SGLang option: its dest name, option strings (first is canonical) and allowed values."""

    dest: str
    option: str
    aliases: tuple[str, ...]
    kind: FlagKind
    value_type: str | None
    choices: tuple[str, ...] | None
    negation: str | None = None


@dataclass(frozen=True)
class FlagTable:
    """Every launch option of one SGLang version, by dest name."""

    version: str
    source: str
    flags: dict[str, Flag]

    @classmethod
    def from_dump(cls, dump: dict[str, Any], source: str) -> FlagTable:
        """Build from the JSON dump format (``{"sglang_version", "options": [{opts, dest, ...}]}``)."""
        flags: dict[str, Flag] = {}
        for opt in dump["options"]:
            negations = [o for o in opt["opts"] if o.startswith("--no-")]
            opts = [o for o in opt["opts"] if o.startswith("--") and o not in negations]
            if not opts or opt["dest"] in ("help",):
                continue
            nargs = opt.get("nargs")
            kind: FlagKind
            if nargs in (0, "0"):
                kind = "bool"
            elif nargs in ("+", "*"):
                kind = "list"
            else:
                kind = "value"
            choices = opt.get("choices")
            flags.setdefault(opt["dest"], Flag(
                dest=opt["dest"], option=opts[0], aliases=tuple(opts[1:]), kind=kind,
                value_type=opt.get("type"),
                choices=tuple(str(c) for c in choices) if choices and kind != "bool" else None,
                negation=negations[0] if negations else None,
            ))
        return cls(version=str(dump["sglang_version"]), source=source, flags=flags)

    @classmethod
    def bundled(cls, version: str = DEFAULT_VERSION) -> FlagTable:
        """The table shipped with the tool for ``version``; ConfigError if there is none."""
        if version not in BUNDLED_VERSIONS:
            raise ConfigError(
                f"no bundled SGLang flag table for version {version!r} (bundled: "
                f"{', '.join(BUNDLED_VERSIONS)}); point --sglang-python at that SGLang to introspect it"
            )
        text = resources.files("core.flag_tables").joinpath(f"sglang-{version}.json").read_text()
        return cls.from_dump(json.loads(text), source=f"bundled table sglang-{version}.json")

    def resolve(self, name: str) -> Flag | None:
        """The flag for a logical dest name in this version, following renames; None if absent."""
        return next((self.flags[spelled] for spelled in spellings(name) if spelled in self.flags), None)

    def by_option(self, option: str) -> Flag | None:
        """The flag an option string (``--tp-size``, an alias or a ``--no-`` negation) belongs to."""
        for flag in self.flags.values():
            if option == flag.option or option in flag.aliases or option == flag.negation:
                return flag
        return None

    def lookup(self, name: str) -> Flag:
        """Like :meth:`resolve` but raises FlagError with a suggestion for an unknown name."""
        flag = self.resolve(name)
        if flag is None:
            hint = difflib.get_close_matches(name, list(self.flags), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise FlagError(f"{name!r} is not an option of SGLang {self.version}{extra}")
        return flag

    def check_value(self, name: str, value: object) -> Flag:
        """Raise FlagError unless ``value`` is acceptable for option ``name`` in this version."""
        flag = self.lookup(name)
        values = value if isinstance(value, list | tuple) else [value]
        if flag.kind == "bool":
            if not isinstance(value, bool):
                raise FlagError(f"{value!r} is not a boolean for {flag.option} of SGLang {self.version}")
            return flag
        if flag.kind == "value" and isinstance(value, list | tuple):
            raise FlagError(f"{flag.option} of SGLang {self.version} takes one value, not a list")
        for item in values:
            if item is None:
                continue
            _check_type(flag, item, self.version)
            allowed = flag.choices or KNOWN_VALUES.get(flag.dest)
            if allowed and str(item) not in allowed and str(item).upper() not in allowed:
                hint = difflib.get_close_matches(str(item), list(allowed), n=1)
                extra = f" (did you mean {hint[0]!r}?)" if hint else f"; allowed: {', '.join(allowed)}"
                raise FlagError(f"{item!r} is not a {flag.option} of SGLang {self.version}{extra}")
        return flag


def _check_type(flag: Flag, item: object, version: str) -> None:
    if item is None:
        return
    if flag.value_type in ("int", "human_readable_int") and (
        isinstance(item, bool) or not isinstance(item, int)
    ) and not (flag.value_type == "human_readable_int" and isinstance(item, str)):
        raise FlagError(f"{item!r} is not an integer for {flag.option} of SGLang {version}")
    if flag.value_type == "float" and (isinstance(item, bool) or not isinstance(item, int | float)):
        raise FlagError(f"{item!r} is not a number for {flag.option} of SGLang {version}")


# Run with the Python that has SGLang installed; prints the parser dump as JSON on stdout.
INTROSPECT_SCRIPT = r"""
import argparse, json, sys
import sglang
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
options = []
for a in parser._actions:
    options.append({"opts": list(a.option_strings), "dest": a.dest,
                    "type": getattr(a.type, "__name__", None) if a.type else None,
                    "action": type(a).__name__, "nargs": a.nargs,
                    "choices": [str(c) for c in a.choices] if a.choices else None})
sys.stdout.write("\n" + MARKER)
json.dump({"sglang_version": getattr(sglang, "__version__", "unknown"), "options": options}, sys.stdout)
"""
INTROSPECT_MARKER = "@@sglang-tuner flag table@@"


def introspect(python: str, timeout_s: float = 120.0) -> FlagTable:
    """Dump the parser of the SGLang importable by ``python``; ConfigError if that fails.

    Cached per user (``~/.cache/sglang-tuner``), keyed by the Python and the path, size and mtime of
    that SGLang's ``server_args.py``: importing SGLang takes 15-25 s on a GPU node, and every GPU-group
    actor of every sweep asked again (a new or changed SGLang misses the cache)."""
    cached = _cache_file(python)
    if cached is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return FlagTable.from_dump(json.loads(cached.read_text()), source=f"introspected with {python} (cached)")
    dump = _dump_parser(python, timeout_s)
    table = FlagTable.from_dump(dump, source=f"introspected with {python}")
    if cached is not None:
        with contextlib.suppress(OSError):
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(dump))
            partial.replace(cached)  # atomic: actors on one node write at the same time
    return table


_FINGERPRINT = ("import importlib.util as u, os, sys\n"
                "s = u.find_spec('sglang')\n"
                "p = os.path.join(os.path.dirname(s.origin), 'srt', 'server_args.py')\n"
                "st = os.stat(p)\n"
                "print(sys.executable, p, st.st_size, st.st_mtime_ns)")


def _cache_file(python: str) -> Path | None:
    """Where the dump of this Python's SGLang is cached (None when its SGLang cannot be located fast)."""
    try:
        proc = subprocess.run([python, "-c", _FINGERPRINT], capture_output=True, text=True, timeout=30,
                              check=False, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    key = hashlib.sha256((proc.stdout.strip() + INTROSPECT_SCRIPT).encode()).hexdigest()[:20]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sglang-tuner" / f"flags-{key}.json"


def _dump_parser(python: str, timeout_s: float) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [python, "-c", f"MARKER = {INTROSPECT_MARKER!r}\n{INTROSPECT_SCRIPT}"], capture_output=True, text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run {python} to introspect SGLang: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"{python}: cannot introspect SGLang's parser: {last} (install SGLang for that Python, "
                          "point sglang_python / --sglang-python at the one that has it, or pin sglang_version "
                          "to use a bundled flag table)")
    _, found, dump = proc.stdout.rpartition(INTROSPECT_MARKER)  # whatever SGLang printed on import comes before
    try:
        if not found:
            raise ValueError("no flag table in its output")
        parsed = json.loads(dump)
        FlagTable.from_dump(parsed, source="check")
        return parsed  # type: ignore[no-any-return]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{python}: unreadable SGLang parser dump: {exc}") from exc


def table_for(python: str | None, version: str | None) -> FlagTable:
    """Introspect SGLang under ``python`` if given and possible, else the bundled table of ``version``."""
    if python:
        try:
            return introspect(python)
        except ConfigError:
            if version is None:
                raise
    return FlagTable.bundled(version or DEFAULT_VERSION)
