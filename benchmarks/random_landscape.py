"""Random landscapes nobody tuned to: a scenario and its space, drawn from a seed.

Each landscape has 6-8 parameters of 2-6 values on a simulated 8-GPU node: a main effect per value
(log-normal), pairwise interactions (some that make a setting good alone and bad with another, one
pair that pays only together), and failure rules on single settings and on pairs, half of them with a
log line naming the settings and half with a line naming nothing; the draw is repeated until 30-60%
of the configurations fail. Used by ``benchmarks/sampler_efficiency.py --random N``.

    python benchmarks/random_landscape.py SEED OUT_DIR    # writes OUT_DIR/random-SEED.yaml (+ scenario)
"""

from __future__ import annotations

import itertools
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

# Real SGLang options and values, so the spaces render and parse like any other.
KNOBS: list[tuple[str, list[Any]]] = [
    ("moe_runner_backend", ["auto", "triton", "deep_gemm", "cutlass", "marlin", "flashinfer_cutlass"]),
    ("attention_backend", ["fa3", "flashinfer", "triton", "flashmla"]),
    ("kv_cache_dtype", ["auto", "fp8_e4m3", "fp8_e5m2"]),
    ("cuda_graph_max_bs", [16, 32, 64, 128, 256]),
    ("ep_size", [1, 2, 4, 8]),
    ("moe_a2a_backend", ["none", "deepep", "mooncake"]),
    ("chunked_prefill_size", [2048, 4096, 8192, 16384]),
    ("schedule_policy", ["fcfs", "lpm", "dfs-weight"]),
    ("enable_two_batch_overlap", [False, True]),
    ("num_continuous_decode_steps", [1, 2, 4]),
    ("speculative_num_steps", [1, 2, 3, 4, 5]),
]
RUN_CV = 0.01  # launch-to-launch noise of a reading (scenario noise.run_cv); docs/real-gpu.md has the real engine's
FATAL = ["RuntimeError: CUDA error: an illegal memory access was encountered",
         "RuntimeError: CUDA error: misaligned address", "Segmentation fault (core dumped)"]


def _values(knob: str, values: list[Any], rng: random.Random) -> list[Any]:
    k = rng.randint(2, min(6, len(values)))
    return values[:k] if knob in ("cuda_graph_max_bs", "ep_size", "speculative_num_steps") else rng.sample(values, k)


def draw(seed: int, run_cv: float = RUN_CV) -> tuple[dict[str, Any], dict[str, Any]]:
    """(scenario, space) of one landscape, its launches read with ``run_cv`` launch-to-launch noise; the
    caller checks the failure share."""
    rng = random.Random(seed)
    knobs = rng.sample(KNOBS[:-1], rng.randint(6, 8))
    params = {name: _values(name, vals, rng) for name, vals in knobs}
    effects: list[dict[str, Any]] = []
    for name, vals in params.items():
        for v in vals[1:]:
            factor = round(rng.lognormvariate(0, 0.08), 3)
            effects.append({"match": {name: v}, "tok_s": factor})
    pairs = list(itertools.combinations(params, 2))
    for a, b in rng.sample(pairs, 4):  # good alone, bad together (or the reverse)
        va, vb = rng.choice(params[a][1:]), rng.choice(params[b][1:])
        effects.append({"match": {a: va, b: vb}, "tok_s": round(rng.choice([0.75, 0.82, 1.15, 1.22]), 3)})
    a, b = rng.choice(pairs)  # one pair that pays only together
    va, vb = rng.choice(params[a]), rng.choice(params[b])
    effects.append({"match": {a: va}, "tok_s": 0.9})
    effects.append({"match": {b: vb}, "tok_s": 0.9})
    effects.append({"match": {a: va, b: vb}, "tok_s": 1.45})
    failures: list[dict[str, Any]] = []
    for i in range(rng.randint(4, 6)):
        keys = rng.sample(list(params), rng.choice([1, 2, 2]))
        match = {k: rng.choice(params[k]) for k in keys}
        if len(keys) == 1 and match[keys[0]] == params[keys[0]][0]:
            continue  # never fail a parameter's first value alone: the baseline must mostly run
        named = i % 2 == 0
        log = ("AssertionError: " + " with ".join(f"{k}={v}" for k, v in match.items()) + " is not supported"
               if named else rng.choice(FATAL))
        failures.append({"match": match, "at": "startup", "exit_code": 1 if named else 137, "log": log})
    scenario = {"name": f"random-{seed}", "sglang_version": "0.5.23",
                "gpu": {"name": "Random GPU", "arch": "sm_90", "count": 8, "memory_gb": 80}, "time_scale": 20,
                "base": {"tok_s_c16": 400.0, "ttft_ms": 200, "startup_s": 120}, "effects": effects,
                "failures": failures, "noise": {"cv": 0.015, "seed": seed, "run_cv": run_cv},
                "responses": [{"prompt": "17\\s*\\*\\s*23", "text": "391"}]}
    space = {"name": f"random-{seed}", "engine": "sim", "scenario": f"random-{seed}.scenario.yaml",
             "gpus_per_trial": 8, "startup_timeout_s": 60,
             "base": {"model_path": "/models/random", "tp_size": 8, "mem_fraction_static": 0.85},
             "params": {name: {"choices": vals} for name, vals in params.items()},
             "benchmark": {"concurrency": 16, "input_len": 256, "output_len": 128, "warmup_s": 1.0,
                           "duration_s": 3.0, "request_timeout_s": 10},
             "gate": {"prompts": [{"text": "What is 17*23? Answer with the number only.", "expect": "391"}]}}
    return scenario, space


def write(seed: int, out: Path, run_cv: float = RUN_CV) -> Path:
    """Write a landscape whose failure share is 30-60% (drawing again from seed, seed+1000, ...)."""
    from tuner.space_loader import load_space
    from workers.sim.offline import OfflineModel

    out.mkdir(parents=True, exist_ok=True)
    for attempt in range(50):
        scenario, space = draw(seed + 1000 * attempt, run_cv)
        scenario["name"] = space["name"] = f"random-{seed}"
        space["scenario"] = f"random-{seed}.scenario.yaml"
        (out / f"random-{seed}.scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
        path = out / f"random-{seed}.yaml"
        path.write_text(yaml.safe_dump(space, sort_keys=False))
        loaded, model = load_space(path), OfflineModel(out / f"random-{seed}.scenario.yaml")
        configs = list(loaded.iter_configs())
        failing = sum(model.verdict(loaded.from_params(p)).tok_s is None for p in configs)
        if 0.3 <= failing / len(configs) <= 0.6:
            return path
    raise RuntimeError(f"no landscape with 30-60% failures from seed {seed}")


def write_many(first: int, count: int, run_cv: float = RUN_CV) -> list[str]:
    """Paths of ``count`` landscapes (:func:`write`) from seed ``first`` on, in a new temporary folder."""
    if not count:
        return []
    out = Path(tempfile.mkdtemp(prefix="landscapes-"))
    return [str(write(first + i, out, run_cv)) for i in range(count)]


def adjusted(space_path: str) -> str:
    """A copy of a random landscape (``<space>-adjusted``) where, as SGLang does with an all-to-all
    backend and the EP size, one setting's value makes SGLang run another at one value whatever was asked:
    ``{A: a}`` sets ``B = b``, drawn from the landscape's seed apart from the rest of it (A's value not
    its first, so the baseline runs as asked). Effects, failures and ``/server_info`` see ``b``; the
    failure share is not drawn again."""
    source = Path(space_path)
    space = yaml.safe_load(source.read_text())
    scenario = yaml.safe_load((source.parent / space["scenario"]).read_text())
    rng = random.Random(f"{scenario['name']}:adjusted")
    params = {name: spec["choices"] for name, spec in space["params"].items()}
    a, b = rng.sample(sorted(params), 2)
    scenario["adjustments"] = [{"match": {a: rng.choice(params[a][1:])}, "sets": {b: rng.choice(params[b])}}]
    name = f"{source.stem}-adjusted"
    out = Path(tempfile.mkdtemp(prefix="adjusted-"))
    scenario["name"] = space["name"] = name
    (out / f"{name}.scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    (out / f"{name}.yaml").write_text(yaml.safe_dump({**space, "scenario": f"{name}.scenario.yaml"}, sort_keys=False))
    return str(out / f"{name}.yaml")


def redraw(space_path: str, instances: int) -> list[str]:
    """``space_path`` and ``instances - 1`` more instances of its landscape, in a new temporary folder:
    the same space and scenario with the scenario's ``noise.seed`` moved on by 1, 2, ... (named
    ``<space>@1``, ...), so each configuration's own deviation and every launch's noise are drawn
    anew. One draw of a scenario's noise is one landscape; a strategy's count of seeds at >= 97% on
    it says as much about that draw as about the strategy."""
    if instances <= 1:
        return [space_path]
    source = Path(space_path)
    space = yaml.safe_load(source.read_text())
    scenario_path = source.parent / space["scenario"]
    scenario = yaml.safe_load(scenario_path.read_text())
    out = Path(tempfile.mkdtemp(prefix="instances-"))
    paths = [space_path]
    for i in range(1, instances):
        name = f"{source.stem}@{i}"
        noise = scenario.get("noise") or {}
        copy = {**scenario, "noise": {**noise, "seed": int(noise.get("seed", 0)) + i}}
        (out / f"{name}.scenario.yaml").write_text(yaml.safe_dump(copy, sort_keys=False))
        (out / f"{name}.yaml").write_text(yaml.safe_dump({**space, "scenario": f"{name}.scenario.yaml"},
                                                         sort_keys=False))
        paths.append(str(out / f"{name}.yaml"))
    return paths


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    print(write(int(sys.argv[1]), Path(sys.argv[2])))
