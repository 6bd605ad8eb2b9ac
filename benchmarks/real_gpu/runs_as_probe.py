"""What real SGLang runs otherwise than asked, and what the tuner reads back (run on a GPU machine).

Part 1 resolves SGLang's own ``ServerArgs`` for option sets the bundled scenarios model (an all-to-all
backend with an EP size, fa3 with an fp8_e5m2 KV cache, the cutlass runner with EP, draft tokens
with topk 1, flashmla with topk 2) and prints, per set, the options SGLang changed, the lines it
logged, or the error it raised. Part 2 launches servers the way a trial does (``core.render`` +
``workers.server.ServerProcess``): one as the tiny space's trials (every setting should read back as
asked) and one with fa3 and an fp8_e5m2 KV cache; it reads ``/server_info`` as the worker does and
prints what ``core.flags.ran_otherwise`` makes of it (``TrialResult.ran_as``).

    python benchmarks/real_gpu/runs_as_probe.py --model /tmp/tiny [--launch] [--dump DIR]  # SGLang importable
    bash benchmarks/real_gpu/run.sh runsas OUT                                             # on the GPU node

(Written for SGLang 0.5.17 of ../shared/gpu-kit; run on an H100 on 2026-12-07: what it printed is
benchmarks/real_gpu/results/runs-as-h100-2026-12-07.txt, read in docs/real-gpu.md.)
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.types import Config
from tuner.space_loader import load_space

CASES: dict[str, dict[str, Any]] = {
    "deepep, EP 1 of TP 8": {"tp_size": 8, "ep_size": 1, "moe_a2a_backend": "deepep"},
    "mooncake, EP 2 of TP 8": {"tp_size": 8, "ep_size": 2, "moe_a2a_backend": "mooncake"},
    "fa3 with an fp8_e5m2 KV cache": {"attention_backend": "fa3", "kv_cache_dtype": "fp8_e5m2"},
    "cutlass fp8, EP 2 of TP 8": {"tp_size": 8, "ep_size": 2, "moe_runner_backend": "cutlass", "quantization": "fp8"},
    "cutlass fp8 with deepep, EP 1 of TP 8": {"tp_size": 8, "ep_size": 1, "moe_runner_backend": "cutlass",
                                              "quantization": "fp8", "moe_a2a_backend": "deepep"},
    "EAGLE topk 1, 3 steps, 8 draft tokens": {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                                              "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 8},
    "flashmla with EAGLE topk 2": {"attention_backend": "flashmla", "speculative_algorithm": "EAGLE",
                                   "speculative_num_steps": 3, "speculative_eagle_topk": 2,
                                   "speculative_num_draft_tokens": 4},
}
HERE = Path(__file__).resolve().parent
# (space file beside this script, parameters): configurations of the real-GPU spaces, launched as trials
LAUNCHES: dict[str, tuple[str, dict[str, Any]]] = {
    # a trial of the tiny space: every setting should read back as asked (ran_as {})
    "as the tiny space's trials": ("tiny-h200.yaml", {"cuda_graph_max_bs": 32, "chunked_prefill_size": 2048,
                                                      "memory": "normal"}),
    # fa3 with an fp8_e5m2 KV cache (the carried sgl-kernel has no FA3: runs only if SGLang swaps it)
    "fa3 with an fp8_e5m2 KV cache": ("tiny-h200-runs-as.yaml", {"attention_backend": "fa3", "cuda_graph_max_bs": 32}),
}


def resolve(model: str, options: dict[str, Any]) -> str:
    """What SGLang's ServerArgs makes of ``options``: the changed ones and its log lines, or its error."""
    from sglang.srt.server_args import ServerArgs

    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    logging.getLogger().addHandler(handler)
    asked = {"model_path": model, **options}
    if "speculative_algorithm" in options:
        asked["speculative_draft_model_path"] = model
    try:
        args = ServerArgs(**asked)
    except Exception as exc:  # the point is to print what SGLang raises
        return f"raised {type(exc).__name__}: {exc}"
    finally:
        logging.getLogger().removeHandler(handler)
    resolved = dataclasses.asdict(args)
    changed = {k: resolved[k] for k, v in options.items() if k in resolved and resolved[k] != v}
    said = [line for line in lines.getvalue().splitlines() if line.strip()]
    return f"runs {changed or 'as asked'}" + "".join(f"\n      log: {line[:200]}" for line in said)


def trial_config(model: str, space_file: str, params: dict[str, Any]) -> Config:
    """The configuration a sweep of ``space_file`` (beside this script) launches for ``params``, on ``model``."""
    config = load_space(HERE / space_file).from_params(params)
    return Config(params=config.params, flags={**config.flags, "model_path": model}, env=config.env)


def launch(config: Config, python: str, dump: Path | None) -> None:
    """One server as a trial launches it, and what the worker reads back from /server_info (written
    whole to ``dump`` when given)."""
    from core.flags import FlagTable, ran_otherwise
    from core.render import render
    from core.types import EngineKind, EngineSpec
    from workers.server import ServerProcess, free_port

    flags = dict(config.flags)
    port = free_port()
    engine = EngineSpec(kind=EngineKind.SGLANG, python=python)
    cmd = render(config, FlagTable.bundled("0.5.17"), engine, host="127.0.0.1", port=port)
    log = Path(tempfile.mkdtemp()) / "server.log"
    server = ServerProcess(cmd, log, url=f"http://127.0.0.1:{port}")
    t0 = time.monotonic()
    server.start()
    try:
        startup = server.wait_ready(300)
        info = server.server_info()
        if dump is not None:
            dump.write_text(json.dumps(info, indent=1, sort_keys=True, default=str))
        print(f"launched {' '.join(cmd.argv[3:])}: ready in {startup:.0f} s")
        print(f"  /server_info: attention_backend={info.get('attention_backend')} "
              f"kv_cache_dtype={info.get('kv_cache_dtype')} version={info.get('version')}")
        print(f"  ran_as (what the trial records): {ran_otherwise(flags, info)}")
    except Exception as exc:  # print why, and the server's last lines
        print(f"launch failed after {time.monotonic() - t0:.0f} s: {exc}")
        print("\n".join(server.read_log().splitlines()[-15:]))
    finally:
        server.stop()


def main() -> None:
    """Parse arguments, resolve each case, optionally launch the servers of :data:`LAUNCHES`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model directory (dummy weights will do)")
    parser.add_argument("--launch", action="store_true", help="also launch each of LAUNCHES and read its /server_info")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs SGLang")
    parser.add_argument("--dump", type=Path, help="a folder for each launch's whole /server_info (JSON)")
    args = parser.parse_args()
    import sglang

    print(f"SGLang {sglang.__version__}")
    for name, options in CASES.items():
        print(f"  {name}: {resolve(args.model, options)}")
    if args.launch:
        for number, (name, (space_file, params)) in enumerate(LAUNCHES.items()):
            print(f"launch {number}: {name}")
            dump = args.dump / f"server_info_{number}.json" if args.dump else None
            launch(trial_config(args.model, space_file, params), args.python, dump)


if __name__ == "__main__":
    main()
