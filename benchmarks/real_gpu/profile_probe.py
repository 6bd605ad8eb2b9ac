"""On a GPU node with the kit: what SGLang's profiler endpoints write (files, trace format, kernel events)
and which warnings it prints for a few settings. Used to build `--profile-best` and workers/notices.py
against the real engine (benchmarks/real_gpu/run.sh profile OUT)."""

from __future__ import annotations

import concurrent.futures
import glob
import gzip
import json
import os
import subprocess
import sys
import time

import httpx

OUT = sys.argv[1]
BASE = ["--model-path", "/tmp/tiny", "--load-format", "dummy", "--attention-backend", "triton",
        "--sampling-backend", "pytorch", "--grammar-backend", "none", "--mem-fraction-static", "0.3",
        "--host", "127.0.0.1"]


def serve(port: int, extra: list[str], name: str) -> tuple[subprocess.Popen[bytes], str]:
    with open(f"{OUT}/{name}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", *BASE, "--port", str(port), *extra],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    return proc, ""


def load(url: str, n: int = 32) -> None:
    body = {"input_ids": list(range(100, 612)), "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: httpx.post(f"{url}/generate", json=body, timeout=120), range(n)))


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, 15)
    proc.wait(60)


proc, url = serve(31001, [], "profiled")
print("ready", bool(url), flush=True)
if url:
    load(url, 8)
    prof = f"{OUT}/prof"
    r = httpx.post(f"{url}/start_profile", json={"output_dir": prof, "num_steps": 20, "activities": ["GPU"]},
                   timeout=60)
    print("start_profile", r.status_code, r.text[:300], flush=True)
    load(url, 32)
    time.sleep(3)
    r2 = httpx.post(f"{url}/stop_profile", timeout=60)
    print("stop_profile", r2.status_code, r2.text[:300], flush=True)
    time.sleep(5)
    files = sorted(glob.glob(f"{prof}/**/*", recursive=True))
    print("files", [(f, os.path.getsize(f)) for f in files if os.path.isfile(f)], flush=True)
    for f in files:
        if f.endswith((".json.gz", ".json")) and os.path.isfile(f):
            with (gzip.open(f) if f.endswith(".gz") else open(f, "rb")) as fh:
                data = json.load(fh)
            events = data.get("traceEvents", data) if isinstance(data, dict) else data
            cats: dict[str, int] = {}
            for e in events:
                cats[str(e.get("cat"))] = cats.get(str(e.get("cat")), 0) + 1
            print(f, "keys", list(data)[:8] if isinstance(data, dict) else "list", "cats", cats, flush=True)
            kern = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
            sums: dict[str, float] = {}
            for e in kern:
                sums[e["name"]] = sums.get(e["name"], 0.0) + float(e.get("dur", 0))
            total = sum(sums.values()) or 1
            for name, d in sorted(sums.items(), key=lambda kv: -kv[1])[:8]:
                print(f"  {d / total:6.1%} {name[:140]}", flush=True)
            print("  one kernel event:", json.dumps(kern[0])[:600] if kern else None, flush=True)
    stop(proc)
for name, extra in (("nograph", ["--disable-cuda-graph"]), ("dpattn", ["--dp-size", "1", "--enable-dp-attention"])):
    proc, url = serve(31002, extra, name)
    print(name, "ready", bool(url), flush=True)
    stop(proc)
    with open(f"{OUT}/{name}.log", errors="replace") as fh:
        lines = fh.read().splitlines()
    print(name, "warning-like lines:", [ln[:200] for ln in lines if any(w in ln.lower() for w in (
        "warn", "disable", "adjust", "deprecat", "fall", "default"))][:12], flush=True)
