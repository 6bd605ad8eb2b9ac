"""Building a :class:`~tuner.space.SearchSpace` from a file: compile the shape-checked YAML into
parameters and rules, check every setting against a flag table, check the GPU count, and drop the
choices the hardware rules exclude. ``load_space`` is the entry point."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from core.errors import ConfigError, FlagError
from core.flags import FlagTable
from core.hardware import Pruned, violated_rule
from core.validation import format_validation_error
from tuner.parallelism import with_parallel_rules
from tuner.space import Param, SearchSpace, Settings
from tuner.space_file import ParamSpec, SpaceFile, load_space_file


def parse_assignments(items: list[str], space: SearchSpace) -> dict[str, Any]:
    """``["ep_size=2", "quant_format=nvfp4"]`` -> typed values: a choice of the parameter whose text is
    the value (so ``speculative=off`` is the choice ``off``, not YAML's false), else a YAML scalar,
    else the text itself."""
    out: dict[str, Any] = {}
    params = {p.name: p for p in space.params}
    for item in items:
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected param=value")
        param = params.get(key)
        as_text = [v for v in (param.values() or []) if str(v) == raw] if param else []
        if as_text:
            out[key] = as_text[0]
            continue
        try:
            out[key] = yaml.safe_load(raw) if raw else ""
        except (yaml.YAMLError, RecursionError):
            out[key] = raw
    return out


# ---- compiling ------------------------------------------------------------------------------
def _split_settings(body: dict[str, Any], where: str) -> tuple[Settings, dict[str, dict[str, Any]]]:
    flags: dict[str, Any] = {}
    env: dict[str, str] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in body.items():
        if key == "env":
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ConfigError(f"{where}.env: expected a mapping VAR: value")
            for var, val in value.items():
                if isinstance(val, dict | list) or val is None:
                    raise ConfigError(f"{where}.env.{var}: {val!r}: an env value must be a string or number")
                env[var] = str(val).lower() if isinstance(val, bool) else str(val)
        elif isinstance(value, dict) and {"choices", "int", "float"} & set(value):
            nested[key] = value
        elif isinstance(value, dict):
            raise ConfigError(f"{where}.{key}: a mapping needs choices, int or float to be a parameter")
        else:
            flags[key] = value
    return Settings(flags, env), nested


def _compile_param(name: str, spec: ParamSpec, where: str,
                   conditions: tuple[tuple[str, tuple[Any, ...]], ...], out: list[Param],
                   source: str) -> None:
    if spec.choices is not None and isinstance(spec.choices, dict):
        options: dict[str, Settings] = {}
        children: list[tuple[str, dict[str, Any], str]] = []
        for label, body in spec.choices.items():
            settings, nested = _split_settings(body or {}, f"{where}.choices.{label}")
            options[str(label)] = settings
            children += [(f"{label}", {k: v}, f"{where}.choices.{label}.{k}") for k, v in nested.items()]
        out.append(Param(name=name, path=where, kind="categorical", choices=tuple(options),
                         options=options, conditions=conditions))
        for label, nested, path in children:
            (key, raw), = nested.items()
            try:
                child = ParamSpec.model_validate(raw)
            except ValidationError as exc:
                key_path = path.split(": ", 1)[-1]
                raise ConfigError(format_validation_error(source, exc, prefix=key_path)) from exc
            _compile_param(f"{name}.{label}.{key}", child.model_copy(update={"flag": child.flag or key}),
                           path, (*conditions, (name, (label,))), out, source)
        return
    target = ("env", spec.env) if spec.env else ("flag", spec.flag or name.rsplit(".", 1)[-1])
    if spec.choices is not None:
        out.append(Param(name=name, path=where, kind="categorical", choices=tuple(spec.choices),
                         target=target, conditions=conditions))
    else:
        rng = spec.int_range or spec.float_range
        assert rng is not None
        out.append(Param(name=name, path=where, kind="int" if spec.int_range else "float",
                         low=rng[0], high=rng[1], step=spec.step, log=spec.log, target=target,
                         conditions=conditions))


def compile_space(file: SpaceFile, path: str, text: str) -> SearchSpace:
    """Turn a shape-checked file into parameters and rules (no flag table needed)."""
    base, nested = _split_settings(dict(file.base), f"{path}: base")
    if nested:
        raise ConfigError(f"{path}: base.{next(iter(nested))}: base settings are fixed; put ranges under params")
    params: list[Param] = []
    for name, spec in file.params.items():
        conditions: tuple[tuple[str, tuple[Any, ...]], ...] = ()
        if spec.when:
            known = {p.name: p for p in params}
            for parent, vals in spec.when.items():
                if parent not in known:
                    raise ConfigError(f"{path}: params.{name}.when.{parent}: conditional parameter without "
                                      f"its parent: {parent!r} is not a parameter defined above")
                allowed = tuple(vals) if isinstance(vals, list) else (vals,)
                _check_values(known[parent], allowed, f"{path}: params.{name}.when.{parent}")
                conditions += ((parent, allowed),)
        _compile_param(name, spec, f"{path}: params.{name}", conditions, params, path)
    by_name = {p.name: p for p in params}
    forbid: list[dict[str, tuple[Any, ...]]] = []
    for i, rule in enumerate(file.forbid):
        if not rule:
            raise ConfigError(f"{path}: forbid[{i}]: empty rule")
        compiled: dict[str, tuple[Any, ...]] = {}
        for key, vals in rule.items():
            if key not in by_name:
                raise ConfigError(f"{path}: forbid[{i}].{key}: unknown parameter (parameters: "
                                  f"{', '.join(by_name)})")
            allowed = tuple(vals) if isinstance(vals, list) else (vals,)
            _check_values(by_name[key], allowed, f"{path}: forbid[{i}].{key}")
            compiled[key] = allowed
        forbid.append(compiled)
    return SearchSpace(file=file, path=path, text=text, base=base, params=tuple(params),
                       forbid=tuple(forbid))


def _check_values(param: Param, values: tuple[Any, ...], where: str) -> None:
    finite = param.values()
    for v in values:
        if finite is not None and v not in finite:
            raise ConfigError(f"{where}: {v!r} is not a value of parameter {param.name!r} "
                              f"(values: {', '.join(map(str, finite[:12]))})")


def check_flags(space: SearchSpace, table: FlagTable) -> None:
    """Raise FlagError (one line, key path) unless every setting is valid for this SGLang version."""
    def check(name: str, value: Any, where: str) -> None:
        try:
            table.check_value(name, value)
        except FlagError as exc:
            raise FlagError(f"{where}: {exc}") from None

    for name, value in space.base.flags.items():
        check(name, value, f"{space.path}: base.{name}")
    for param in space.params:
        if param.target is None:
            for label, opt in param.options.items():
                for name, value in opt.flags.items():
                    check(name, value, f"{param.path}.choices.{label}.{name}")
        elif param.target[0] == "flag":
            values = param.values() or [param.low, param.high]
            for i, value in enumerate(values):
                suffix = f".choices[{i}]" if param.kind == "categorical" else ""
                check(param.target[1], value, f"{param.path}{suffix}")


def apply_hardware(space: SearchSpace, arch: str | None, version: str | None = None) -> SearchSpace:
    """Drop the choices that cannot run on ``arch`` with SGLang ``version`` (see core.hardware);
    ConfigError if none is left."""
    if arch is None:
        return space

    for name, value in space.base.flags.items():
        rule = violated_rule({name: value}, arch, version)
        if rule:
            raise ConfigError(f"{space.path}: base.{name}: {value!r} cannot run on {arch}: {rule}")
    pruned: list[Pruned] = []
    params: list[Param] = []
    for param in space.params:
        keep = []
        for choice in param.choices:
            rule = violated_rule(param.flags_for(choice), arch, version)
            if rule:
                pruned.append(Pruned(param.name, choice, rule))
            else:
                keep.append(choice)
        if param.kind == "categorical" and not keep:
            raise ConfigError(f"{param.path}: no choice can run on {arch} "
                              f"({'; '.join(p.reason for p in pruned if p.param == param.name)})")
        params.append(replace(param, choices=tuple(keep)) if param.kind == "categorical" else param)
    names = {p.name: p for p in params}
    forbid = tuple(
        {k: tuple(v for v in vals if v in names[k].choices or names[k].kind != "categorical")
         for k, vals in rule.items()}
        for rule in space.forbid
    )
    return replace(space, params=tuple(params), forbid=forbid, pruned=tuple(pruned))


def load_space(path: str | Path, table: FlagTable | None = None, arch: str | None = None) -> SearchSpace:
    """Load, validate and compile a space file; check flags if a table is given; prune for ``arch``."""
    file, text = load_space_file(path)
    space = with_parallel_rules(compile_space(file, str(path), text))
    if table is not None:
        check_flags(space, table)
    return apply_hardware(space, arch or file.gpu, table.version if table is not None else None)
