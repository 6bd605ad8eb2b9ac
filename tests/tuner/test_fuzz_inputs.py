"""Property-based: whatever a user gives (space and scenario files mutated from the bundled ones,
``--set`` values of any text, any CLI arguments, database files of any bytes), the answer is a
result or one line naming what is wrong, with exit 2 (bad input) or 1 (environment); never a
traceback. The real CLI runs in process (typer's runner) so that hundreds of inputs take seconds."""

from __future__ import annotations

import random
from pathlib import Path

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from core.errors import TunerError
from tests.conftest import SCENARIOS, SPACES
from tuner.cli import app
from tuner.space_loader import load_space
from workers.sim.scenario import load_scenario

# no shrinking: it can take minutes; a failure prints its example as generated
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                phases=[Phase.explicit, Phase.reuse, Phase.generate])
BUNDLED_SPACES = sorted(SPACES.glob("*.yaml"))
BUNDLED_SCENARIOS = sorted(SCENARIOS.glob("*.yaml"))

odd_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["off", "no", "~", "null", "1e999", "-0", "0x10", "9" * 40, "[", "{a: [", "!!python/object:os.system",
     "\u202e\u0000", "ｍａｒｌｉｎ", "*alias", "&a [*a]"])
odd_value = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30) | st.floats() | odd_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(odd_text, inner, max_size=3), max_leaves=8)


def _mutate(data: object, rng: random.Random, value: object) -> object:
    """Replace one node of a parsed YAML tree (a key's value, a list item) by ``value``."""
    if isinstance(data, dict) and data:
        key = rng.choice(list(data))
        data[key] = value if rng.random() < 0.4 else _mutate(data[key], rng, value)
        return data
    if isinstance(data, list) and data:
        i = rng.randrange(len(data))
        data[i] = value if rng.random() < 0.4 else _mutate(data[i], rng, value)
        return data
    return value


def _assert_one_line(exc: TunerError) -> None:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, text
    assert exc.exit_code in (1, 2)


def _loads_or_one_line(loader: object, path: Path) -> None:
    try:
        loader(path)  # type: ignore[operator]
    except TunerError as exc:
        _assert_one_line(exc)


def _mutated_loads_or_one_line(tmp_path: Path, source: Path, seed: int, value: object, loader: object) -> None:
    data = yaml.safe_load(source.read_text())
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(_mutate(data, random.Random(seed), value), allow_unicode=True))
    _loads_or_one_line(loader, path)


@FUZZ
@given(source=st.sampled_from(BUNDLED_SPACES), seed=st.integers(0, 2**32), value=odd_value)
def test_a_mutated_space_loads_or_says_what_is_wrong_in_one_line(tmp_path: Path, source: Path, seed: int,
                                                                  value: object) -> None:
    _mutated_loads_or_one_line(tmp_path, source, seed, value, load_space)


@FUZZ
@given(source=st.sampled_from(BUNDLED_SCENARIOS), seed=st.integers(0, 2**32), value=odd_value)
def test_a_mutated_scenario_loads_or_says_what_is_wrong_in_one_line(tmp_path: Path, source: Path, seed: int,
                                                                     value: object) -> None:
    _mutated_loads_or_one_line(tmp_path, source, seed, value, load_scenario)


@FUZZ
@given(source=st.sampled_from(BUNDLED_SPACES + BUNDLED_SCENARIOS), cut=st.floats(0, 1),
       noise=st.binary(max_size=64), nesting=st.integers(0, 3000))
def test_truncated_binary_or_deeply_nested_files_are_one_line(tmp_path: Path, source: Path, cut: float,
                                                              noise: bytes, nesting: int) -> None:
    raw = source.read_bytes()
    for i, blob in enumerate((raw[: int(len(raw) * cut)] + noise, b"a: " + b"[" * nesting + b"]" * nesting,
                              b"a: " + b"{b: " * (nesting // 3) + b"1" + b"}" * (nesting // 3))):
        path = tmp_path / f"f{i}.yaml"
        path.write_bytes(blob)
        _loads_or_one_line(load_space, path)
        _loads_or_one_line(load_scenario, path)


runner = CliRunner()


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), catch_exceptions=True, env={"COLUMNS": "200", "NO_COLOR": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"tuner {' '.join(args)!r} raised {result.exception!r}")
    return result.exit_code, result.output


@FUZZ
@given(setting=st.sampled_from(["quant_format", "moe_runner_backend", "cuda_graph_max_bs", "nccl", "nope",
                                "speculative", ""]), value=odd_text)
def test_any_set_value_renders_or_is_one_line(setting: str, value: str) -> None:
    code, out = _cli("render", str(SPACES / "deepseek-v4-flash-rtx-pro-6000.yaml"), "--set", f"{setting}={value}")
    assert code in (0, 2), out
    if code == 2:
        assert len(out.strip().splitlines()) == 1 and out.startswith("error: "), out


@FUZZ
@given(command=st.sampled_from(["validate", "render", "show", "export", "report"]),
       args=st.lists(st.sampled_from(["--set", "--db", "--study", "--trial", "--format", "-o", "--limit", "--gpu",
                                      "--sglang-version", "--json", "x=1", "-1", "99999999999999999999", "",
                                      "\u00e9\u202e", "/", "/dev/null", "nan"]) | odd_text, max_size=6))
def test_any_arguments_give_a_result_or_one_line(tmp_path: Path, command: str, args: list[str]) -> None:
    argv = [command, *args]
    if command in ("show", "export", "report") and "--db" not in args:
        argv += ["--db", str(tmp_path / "none.db")]  # never the working directory's database
    if command in ("export", "report") and "-o" not in args:
        argv += ["-o", str(tmp_path / "out")]
    code, out = _cli(*argv)
    assert code in (0, 1, 2), out
    assert "Traceback" not in out


@FUZZ
@given(blob=st.binary(max_size=8192) | st.sampled_from([b"", b"SQLite format 3\x00" + bytes(200)]))
def test_a_database_of_any_bytes_is_one_line(tmp_path: Path, blob: bytes) -> None:
    db = tmp_path / "any.db"
    db.write_bytes(blob)
    for command in ("show", "export"):
        code, out = _cli(command, "--db", str(db), *(["-o", str(tmp_path / "x.sh")] if command == "export" else []))
        assert code in (1, 2) and len(out.strip().splitlines()) == 1 and out.startswith("error: "), out
    assert db.read_bytes() == blob  # a reader never writes
