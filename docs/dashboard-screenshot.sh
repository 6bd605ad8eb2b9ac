#!/usr/bin/env bash
# Show `tuner dashboard` working in a real headless browser and save screenshots.
#   bash docs/dashboard-screenshot.sh [OUTDIR]      (default OUTDIR: docs/img)
# Needs Debian's chromium (installed here if missing, as root). Runs a short simulated sweep in a
# temporary directory, serves the dashboard on 127.0.0.1, screenshots the study page and the best
# trial's page (attributes + artifacts), then stops everything it started (by PID).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/docs/img}")
tuner="$root/.venv/bin/tuner"
[ -x "$tuner" ] || { echo "run: python3 -m venv .venv && .venv/bin/pip install -e . (in $root)" >&2; exit 2; }
command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
work=$(mktemp -d)
trap 'kill "$dash" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
"$tuner" sweep --budget 12 --seed 1 >/dev/null
port=$("$root/.venv/bin/python" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
"$tuner" dashboard --port "$port" >dashboard.log 2>&1 &
dash=$!
for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/api/studies" >/dev/null && break; sleep 0.2; done
best=$("$tuner" show --json | "$root/.venv/bin/python" -c "import json,sys; print(json.load(sys.stdin)['trials'][0]['trial_number'])")
mkdir -p "$out"
shot() {
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$work/chrome" --window-size=1500,1100 \
    --virtual-time-budget=15000 --screenshot="$2" "$1" 2>/dev/null
}
shot "http://127.0.0.1:$port/dashboard/studies/1" "$out/dashboard-study.png"
shot "http://127.0.0.1:$port/dashboard/studies/1/trials?numbers=$best" "$out/dashboard-trial.png"
echo "screenshots: $out/dashboard-study.png $out/dashboard-trial.png"
