"""The simulated server's command line: SGLang's own options (from the bundled parser dump of the
scenario's SGLang version), parsed like SGLang parses them (argparse, ``prog="sglang serve"``,
exit 2 on an unknown option or a bad choice), plus ``--sim-scenario``."""

from __future__ import annotations

import argparse
import ast
import json
from importlib import resources
from typing import Any

from core.flags import RENAMES

_TYPES: dict[str, Any] = {"int": int, "float": float}


def _default(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return None


def build_parser(version: str = "0.5.23") -> argparse.ArgumentParser:
    """An argparse parser with every option of SGLang ``version`` (bundled dump)."""
    text = resources.files("core.flag_tables").joinpath(f"sglang-{version}.json").read_text()
    parser = argparse.ArgumentParser(prog="sglang serve")
    seen: set[str] = set()
    for opt in json.loads(text)["options"]:
        strings = [s for s in opt["opts"] if s.startswith("--")]
        if not strings or opt["dest"] == "help" or set(strings) & seen:
            continue
        seen.update(strings)
        kwargs: dict[str, Any] = {"dest": opt["dest"], "default": _default(opt.get("default"))}
        nargs = opt.get("nargs")
        if opt["action"] == "BooleanOptionalAction":
            kwargs["action"] = argparse.BooleanOptionalAction
            strings = [s for s in strings if not s.startswith("--no-")]
        elif nargs in (0, "0"):
            kwargs["action"] = "store_true"
            kwargs["default"] = bool(kwargs["default"])
        else:
            kwargs["type"] = _TYPES.get(str(opt.get("type")), str)
            if nargs not in (None, "None"):
                kwargs["nargs"] = nargs
            if opt.get("choices"):
                kwargs["choices"] = [kwargs["type"](c) for c in opt["choices"]]
        parser.add_argument(*strings, **kwargs)
    parser.add_argument("--sim-scenario", dest="sim_scenario", default=None,
                        help="scenario file (else $SGLANG_SIM_SCENARIO)")
    return parser


def options_by_dest(namespace: argparse.Namespace) -> dict[str, Any]:
    """Parsed options by dest, with renamed options also visible under their other name."""
    options = dict(vars(namespace))
    for old, new in RENAMES.items():
        if new in options and old not in options:
            options[old] = options[new]
        elif old in options and new not in options:
            options[new] = options[old]
    return options
