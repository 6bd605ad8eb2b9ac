"""``python -m workers.sim <SGLang flags>``: start a simulated SGLang server.

Startup mirrors SGLang 0.5.23: options parsed (exit 2 on a bad one), weights "loaded", CUDA graphs
"captured", then the port opens with ``/health`` and ``/ready`` at 503 until the warm-up request
has run, then "The server is fired up and ready to roll!". Failures follow the scenario, with
SGLang's log signatures and exit codes (1: config error, -9/137: scheduler death).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from datetime import datetime

from core.errors import ConfigError
from workers.sim.args import build_parser, options_by_dest
from workers.sim.engine import Scheduler
from workers.sim.offline import dying_log
from workers.sim.scenario import FailureRule, Scenario, evaluate, load_scenario
from workers.sim.server import ServerState, build_app

SCENARIO_ENV = "SGLANG_SIM_SCENARIO"
LAUNCH_SEED_ENV = "SGLANG_SIM_LAUNCH_SEED"  # pins one launch's noise (else a fresh draw per launch)


def log(message: str, rank: str = "") -> None:
    """An SGLang-style log line on stderr."""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}{' ' + rank if rank else ''}] {message}", file=sys.stderr, flush=True)


def die(rule: FailureRule, default_code: int) -> None:
    """Print the failure signature (:func:`workers.sim.offline.dying_log`, the lines the offline model
    reports too) and exit like SGLang does (137 = SIGKILL of the whole tree)."""
    code = rule.exit_code if rule.exit_code is not None else default_code
    for line in dying_log(rule, code):
        print(line, file=sys.stderr, flush=True)
    if code == 137:
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(code)


def _scenario_path(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--sim-scenario" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--sim-scenario="):
            return arg.split("=", 1)[1]
    return os.environ.get(SCENARIO_ENV)


def _launch_seed() -> int:
    """The seed of this launch's noise: SGLANG_SIM_LAUNCH_SEED when set, else a fresh random one."""
    pinned = os.environ.get(LAUNCH_SEED_ENV, "").strip()
    if not pinned:
        return random.SystemRandom().getrandbits(48)
    try:
        return int(pinned)
    except ValueError:
        print(f"sglang serve: error: {LAUNCH_SEED_ENV}={pinned!r} is not an integer", file=sys.stderr)
        raise SystemExit(2) from None


async def serve(state: ServerState, scenario: Scenario, host: str, port: int) -> None:
    """Open the port, warm up, mark the server Up; runs until SIGTERM/SIGINT."""
    import uvicorn

    startup = state.outcome.startup_s / scenario.time_scale
    failure = state.outcome.failure
    sched = state.scheduler
    server = uvicorn.Server(uvicorn.Config(build_app(state), host=host, port=port, log_level="warning",
                                           access_log=False, lifespan="off", timeout_keep_alive=30))

    async def warmup() -> None:
        while not server.started:
            await asyncio.sleep(0.01)
        log(f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        for line in state.outcome.notices:
            log(line)
        await asyncio.sleep(0.10 * startup)
        if failure and failure.at == "hang" and failure.after_requests == 0:
            sched.stalled = True
        if failure and failure.at == "warmup":
            die(failure, 137)
        async for _ in sched.generate("The capital city of France is", 8, False):
            pass
        state.up = True
        log("The server is fired up and ready to roll!")
        if failure and failure.at in ("runtime", "hang"):
            while sched.completed < failure.after_requests + 1:
                await asyncio.sleep(0.01)
            if failure.at == "hang":
                log("Scheduler watchdog: no progress (simulated hang)", "TP0")
                sched.stalled = True
            else:
                die(failure, 137)

    warm = asyncio.create_task(warmup())
    await server.serve()
    warm.cancel()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    path = _scenario_path(args)
    if not path:
        print(f"sglang serve: error: no scenario (set {SCENARIO_ENV} or --sim-scenario)", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(path)
    except ConfigError as exc:
        print(f"sglang serve: error: {exc}", file=sys.stderr)
        return 2
    parser = build_parser(scenario.sglang_version)
    namespace = parser.parse_args(args)  # exits 2 like SGLang on a bad option
    options = options_by_dest(namespace)
    if not options.get("model_path"):
        parser.error("the following arguments are required: --model-path/--model")
    outcome = evaluate(scenario, options, dict(os.environ), launch_seed=_launch_seed())
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(namespace).items()) if v not in (None, False))
    log(f"server_args=ServerArgs({shown})")
    log(f"Simulated engine: scenario {scenario.name!r}, time_scale {scenario.time_scale:g}: modelled "
        f"{outcome.tok_s_c16 * outcome.noise_factor:.2f} tok/s@C16 (measured ~x{scenario.time_scale:g})")
    startup = outcome.startup_s / scenario.time_scale
    failure = outcome.failure
    t0 = time.monotonic()
    mem = scenario.gpu.memory_gb
    log(f"Load weight begin. avail mem={mem - 1.2:.2f} GB", "TP0")
    if failure and failure.at == "startup":
        time.sleep(0.3 * startup)
        die(failure, 1)
    time.sleep(0.55 * startup)
    log(f"Load weight end. elapsed={time.monotonic() - t0:.2f} s, type=DeepseekV4ForCausalLM, "
        f"avail mem={mem * 0.45:.2f} GB, mem usage={mem * 0.5:.2f} GB.", "TP0")
    log(f"Capture cuda graph begin. This can take up to several minutes. avail mem={mem * 0.3:.2f} GB", "TP0")
    time.sleep(0.35 * startup)
    log(f"Capture cuda graph end. Time elapsed: {0.35 * startup:.2f} s. mem usage=1.10 GB. "
        f"avail mem={mem * 0.28:.2f} GB.", "TP0")
    log(f"max_total_num_tokens=1048576, chunked_prefill_size=4096, max_prefill_tokens=16384, "
        f"max_running_requests={options.get('max_running_requests') or 48}, context_len=163840, "
        f"available_gpu_mem={mem * 0.28:.2f} GB", "TP0")
    garbage = bool(failure and failure.at == "output")
    # /server_info reports the options as SGLang runs them (the scenario's adjustments applied)
    state = ServerState(options={**options, **dict(outcome.ran_as)}, scenario=scenario, outcome=outcome,
                        scheduler=Scheduler(scenario, outcome, garbage=garbage), version=scenario.sglang_version)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(state, scenario, str(options.get("host") or "127.0.0.1"),
                          int(options.get("port") or 30000)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
