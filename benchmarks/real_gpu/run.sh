#!/usr/bin/env bash
# Real SGLang on a GPU node, with the kit of ../shared/gpu-kit (built into .gpu-kit/, git-ignored).
#   bash benchmarks/real_gpu/run.sh paths OUT   every trial path through the worker code (carry
#                                                .gpu-kit/site312.tar.xz and .gpu-kit/tiny)
#   bash benchmarks/real_gpu/run.sh unpack OUT  only unpack the kit (carry .gpu-kit/site312.tar.xz)
#   bash benchmarks/real_gpu/run.sh two OUT     on a 2-GPU node, right after `unpack` (carry
#                                                .gpu-kit/ray312.tar.xz and .gpu-kit/tiny): two 1-GPU
#                                                groups at once, then --tp-size 2 trials
#   bash benchmarks/real_gpu/run.sh mixed OUT   on a 2-GPU node, right after `unpack` (carry
#                                                .gpu-kit/ray312.tar.xz and .gpu-kit/tiny): tp_size 1
#                                                and 2 in one sweep, each trial on the GPUs it needs
#   bash benchmarks/real_gpu/run.sh first OUT   after `unpack`: seconds to the first trial, twice
#   bash benchmarks/real_gpu/run.sh profile OUT what /start_profile writes, and warnings for a few
#                                                settings (carry .gpu-kit/site312.tar.xz, .gpu-kit/tiny)
#   bash benchmarks/real_gpu/run.sh sweep OUT   a real `tuner sweep` with --confirm and --profile-best (carry
#                                                .gpu-kit/ray312.tar.xz; run right after `paths`,
#                                                while the node still has /tmp/site312)
#   bash benchmarks/real_gpu/run.sh noise OUT   tok/s@C16 window to window, launch to launch and between
#                                                configurations that run alike (ROUNDS=2 FIRST=0; a
#                                                call with FIRST=2 on the warm node adds rounds; carry
#                                                .gpu-kit/site312.tar.xz and .gpu-kit/tiny)
#   bash benchmarks/real_gpu/run.sh runsas OUT  what SGLang's ServerArgs runs otherwise than asked for the
#                                                scenarios' cases, and two launches read back as a trial
#                                                reads /server_info (carry .gpu-kit/site312.tar.xz, .gpu-kit/tiny)
#   bash benchmarks/real_gpu/run.sh runsas-sweep OUT  right after `runsas` (carry .gpu-kit/ray312.tar.xz):
#                                                a sweep whose fa3 trials SGLang runs as triton
# Results: docs/real-gpu.md. Skipped (exit 0 with a note) where there is no GPU.
set -u
what=$1 OUT=$2
mkdir -p "$OUT"
command -v nvidia-smi >/dev/null || { echo "no GPU here: nothing to run"; exit 0; }
[ -d /tmp/site312 ] || tar -xJf .gpu-kit/site312.tar.xz -C /tmp
[ -d /tmp/tiny ] || cp -r .gpu-kit/tiny /tmp/tiny
case "$what" in sweep|two|first|mixed|runsas-sweep) [ -d /tmp/ray312 ] || tar -xJf .gpu-kit/ray312.tar.xz -C /tmp ;; esac
export PYTHONPATH=/tmp/site312:/tmp/ray312:$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
case "$what" in
  paths)
    # the installed SGLang's own parser, as a bundled flag table (core/flag_tables/sglang-<version>.json)
    python3 -c "import core.flags as f, subprocess, sys, json
out = subprocess.run([sys.executable, '-c', f'MARKER = {f.INTROSPECT_MARKER!r}\n' + f.INTROSPECT_SCRIPT],
                     capture_output=True, text=True).stdout.rpartition(f.INTROSPECT_MARKER)[2]
dump = json.loads(out); open('$OUT/sglang-' + dump['sglang_version'] + '.json', 'w').write(json.dumps(dump, indent=1))
print('flag table of SGLang', dump['sglang_version'], len(dump['options']), 'options')"
    python3 benchmarks/real_gpu/paths.py "$OUT" 2>&1 | tee "$OUT/paths.txt" | grep -v "^\[" ;;
  unpack) ls /tmp/site312 | head -3 ;;
  noise) python3 benchmarks/real_gpu/noise_probe.py "$OUT" "${ROUNDS:-2}" "${FIRST:-0}" 2>&1 | tee "$OUT/noise.txt" \
           | grep -v "^\[" ;;
  profile) python3 benchmarks/real_gpu/profile_probe.py "$OUT" 2>&1 | tee "$OUT/profile.txt" ;;
  runsas) python3 benchmarks/real_gpu/runs_as_probe.py --model /tmp/tiny --launch --python python3 --dump "$OUT" \
            2>&1 | tee "$OUT/runs_as.txt" | grep -v "^\[" ;;
  runsas-sweep)
    db=/tmp/runs-as/tuner.db
    python3 -m tuner.cli sweep --space benchmarks/real_gpu/tiny-h200-runs-as.yaml --budget 5 --db $db --seed 1 \
      2>&1 | tee "$OUT/runs-as-sweep.txt" | grep -v "^\[group" | tail -30
    python3 -m tuner.cli show --db $db | tee "$OUT/runs-as-show.txt" | tail -25
    python3 -c "import sqlite3
for row in sqlite3.connect('$db').execute('SELECT trial_number, status, params, ran_as, cached_from FROM tuner_trial_runs'):
    print(*row)" | tee -a "$OUT/runs-as-show.txt" ;;
  first)  # seconds from `tuner sweep` to its first trial, twice (the second reuses the cached flag table)
    for run in 1 2; do
      t0=$(date +%s.%N)
      python3 -m tuner.cli sweep --space benchmarks/real_gpu/tiny-h200.yaml --budget $run --db /tmp/first.db \
        --seed 1 2>&1 | while IFS= read -r line; do
          case "$line" in *"trial"*"started"*) echo "run $run: first trial after $(awk "BEGIN{print $(date +%s.%N) - $t0}") s";;
                          *"SGLang 0.5"*) echo "$line";; esac; done | tee -a "$OUT/first.txt"
    done ;;
  two)
    for space in tiny-h200 tiny-h200-tp2; do
      db=/tmp/two/$space.db
      budget=$([ $space = tiny-h200 ] && echo 4 || echo 2)
      python3 -m tuner.cli sweep --space benchmarks/real_gpu/$space.yaml --budget $budget --db $db --seed 1 \
        2>&1 | tee "$OUT/$space.txt" | grep -v "^\[group" | tail -12
      python3 -m tuner.cli show --db $db --json > "$OUT/$space.json"
      python3 -c "import json, datetime as d
for t in sorted(json.load(open('$OUT/$space.json'))['trials'], key=lambda t: t['started_at'] or ''):
    print(t['trial_number'], 'GPUs', ','.join(t['gpu_ids']), t['started_at'], '->', t['finished_at'], t['status'], t['tok_s'])" \
        | tee -a "$OUT/overlap.txt"
    done
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$OUT/overlap.txt" ;;
  mixed)
    db=/tmp/mixed/tuner.db
    python3 -m tuner.cli sweep --space benchmarks/real_gpu/tiny-h200-mixed.yaml --budget 5 --db $db --seed 1 \
      2>&1 | tee "$OUT/mixed.txt" | grep -v "^\[group" | tail -25
    python3 -m tuner.cli show --db $db --json > "$OUT/mixed.json"
    python3 -c "import json
for t in sorted(json.load(open('$OUT/mixed.json'))['trials'], key=lambda t: t['started_at'] or ''):
    print(t['trial_number'], 'tp', t['flags'].get('tp_size', 1), 'GPUs', ','.join(t['gpu_ids']), t['started_at'], '->',
          t['finished_at'], t['status'], t['tok_s'])" | tee -a "$OUT/overlap.txt"
    grep -h "CUDA_VISIBLE\|tp_size=2" /tmp/mixed/tuner-runs/tiny-h200-mixed/*.log | head -3
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$OUT/overlap.txt" ;;
  sweep)
    db=/tmp/real-sweep/tuner.db
    python3 -m tuner.cli sweep --space benchmarks/real_gpu/tiny-h200.yaml --budget "${BUDGET:-4}" --confirm 1 \
      --profile-best --db $db --seed 1 2>&1 | tee "$OUT/sweep.txt" | tail -40
    python3 -m tuner.cli show --db $db --json > "$OUT/show.json"
    cp -r /tmp/real-sweep/tuner-runs "$OUT/runs" 2>/dev/null
    python3 -m tuner.cli export --db $db > "$OUT/launch.sh"
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$OUT/sweep.txt" ;;
esac
