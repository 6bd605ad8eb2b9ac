"""Pydantic validation errors as one line: the file, the key path, the bad value, what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from core.errors import ConfigError


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("int", "float") or str(part).startswith(("list[", "dict[", "function-")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def format_validation_error(path: str, exc: ValidationError, prefix: str = "") -> str:
    """The first pydantic error as one line naming the file, key path, bad value and what is allowed.

    ``prefix`` is the key path of the validated object inside the file (for nested parameters).
    """
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("list[", "dict["))))
    where = _loc(loc)
    if prefix:
        where = prefix if where == "(top level)" else f"{prefix}.{where}"
    if err["type"] == "extra_forbidden":
        return f"{path}: {where}: unknown key"
    msg = err["msg"].removeprefix("Value error, ")
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) or value is None else f"{value!r}: "
    return f"{path}: {where}: {shown}{msg}"


def read_text(path: Path, what: str = "") -> str:
    """A file's UTF-8 text; ConfigError in one line naming the file when it cannot be read or is not text."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read{' ' + what if what else ''}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file (byte {exc.start} is not UTF-8)") from exc


def read_yaml(path: Path, what: str = "") -> Any:
    """The parsed YAML of a file; ConfigError in one line naming the file (and the line) when it cannot
    be read, is not UTF-8 text, is not YAML, or nests too deeply to parse."""
    return parse_yaml(read_text(path, what), str(path))


def parse_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` with its errors as one-line ConfigErrors naming ``where`` and the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{where}: {line}not valid YAML: {problem}") from exc
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to read (brackets or mappings hundreds of levels "
                          "deep)") from None
