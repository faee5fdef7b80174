#!/usr/bin/env bash
# What capture costs: runs scripts/bench.sh twice, on a plain mount (AGX_CAPTURE=0) and with
# capture on, and prints bare / plain / capture times with the ratios capture/bare and
# capture/plain. Options are passed to scripts/bench.sh (e.g. --rounds 3 --only untar).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${AGX_BENCH_WORK:-/var/tmp/agx-bench-work}
mkdir -p "$out"
AGX_CAPTURE=0 scripts/bench.sh "$@" --json "$out/plain.json" >/dev/null
scripts/bench.sh "$@" --json "$out/capture.json" >/dev/null
python3 scripts/bench/compare.py "$out/plain.json" "$out/capture.json" --json "$out/compare.json"
