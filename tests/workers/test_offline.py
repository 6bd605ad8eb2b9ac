"""The scenario as a function: the two bundled demo scenarios have different optima."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.types import BenchConfig, Config
from tests.conftest import SPACES
from tuner.space import SearchSpace
from tuner.space_loader import load_space
from workers.sim.offline import OfflineModel


def _best(space_file: str) -> tuple[dict[str, object], float, SearchSpace]:
    space = load_space(SPACES / space_file)
    assert space.file.scenario
    model = OfflineModel(SPACES / space.file.scenario)
    space = load_space(SPACES / space_file, arch=model.scenario.gpu.arch)
    scored = []
    for params in space.iter_configs():
        verdict = model.verdict(space.from_params(params), 16, space.file.benchmark.output_len)
        if verdict.tok_s is not None:
            scored.append((verdict.tok_s, params))
    tok_s, params = max(scored, key=lambda x: x[0])
    return params, tok_s, space


def test_blackwell_demo_optimum_is_nvfp4_marlin_with_mtp() -> None:
    params, tok_s, _ = _best("demo-sim.yaml")
    assert params["quant_format"] == "nvfp4" and params["moe_runner_backend"] == "marlin"
    assert params["speculative"] == "mtp" and params["ep_size"] == 1
    assert tok_s > 28.7


def test_hopper_demo_optimum_is_deepep_deep_gemm_eagle3() -> None:
    params, _, space = _best("demo-sim-hopper.yaml")
    assert params["expert_parallel"] == "deepep" and params["moe_runner_backend"] == "deep_gemm"
    assert params["speculative"] == "eagle3" and params["attention_backend"] == "fa3"
    assert "flashinfer_trtllm" not in next(p for p in space.params if p.name == "moe_runner_backend").choices


def test_garbage_and_crashing_configs_are_failures_offline() -> None:
    space = load_space(SPACES / "demo-sim.yaml")
    model = OfflineModel(SPACES / "scenarios" / "deepseek-v4-flash-8x-rtx-pro-6000.yaml")
    garbage = space.from_assignments({"quant_format": "mxfp4", "moe_runner_backend": "marlin"})
    oom = space.from_assignments({"cuda_graph_max_bs": 64})
    assert model.verdict(garbage).failure == "output"
    assert model.verdict(oom).failure == "startup"


def test_window_drift_is_each_windows_time_average(tmp_path: Path) -> None:
    path = tmp_path / "drift.yaml"
    text = ("name: drift\ntime_scale: 10\nbase: {tok_s_c16: 30.0, ttft_ms: 0, startup_s: 10}\n"
            "noise: {window_cv: 0.2, window_s: 10}\n")
    path.write_text(text)
    model = OfflineModel(path)
    noise = model.scenario.noise
    a, b = noise.drift(7, 12.0), noise.drift(7, 25.0)
    assert a == noise.drift(7, 19.9) != b  # constant over a stretch, drawn anew for the next
    assert noise.mean_drift(7, 15.0, 25.0) == pytest.approx((a + b) / 2)
    assert noise.mean_drift(7, 10.0, 20.0) == pytest.approx(a)
    config = Config(params={}, flags={"model_path": "/m"})
    bench = BenchConfig(concurrency=16, output_len=64, warmup_s=1.0, duration_s=1.0, repeats=3)
    trial = model.trial(config, bench, 60.0, launch_seed=7)
    base = model.verdict(config, 16, 64).tok_s
    assert base is not None
    assert [w / (base * 10) for w in trial.window_tok_s] == pytest.approx([noise.drift(7, t) for t in (15, 25, 35)])
    assert trial.tok_s == sorted(trial.window_tok_s)[1]
    path.write_text(text.replace("window_cv: 0.2", "window_cv: 0"))
    steady = OfflineModel(path)
    assert set(steady.trial(config, bench, 60.0, launch_seed=7).window_tok_s) == {base * 10}
