"""Pydantic validation errors as one line: the file, the key path, the bad value, what is allowed."""

from __future__ import annotations

from pydantic import ValidationError


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
