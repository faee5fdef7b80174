#!/usr/bin/env bash
# What capture costs: runs scripts/bench.sh twice, each alternating its two variants in one
# run (so a drift of the machine or of the filesystem between runs cannot enter a ratio):
# bare directory vs. capture on, then plain mount (AGX_CAPTURE=0) vs. capture on
# (`--base plain`). Prints bare / plain / capture times with capture/bare and
# capture/plain (each measured in its own run) and plain/bare (their quotient). Options are
# passed to scripts/bench.sh (e.g. --rounds 3 --only untar).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${AGX_BENCH_WORK:-/var/tmp/agx-bench-work}
mkdir -p "$out"
scripts/bench.sh "$@" --json "$out/capture.json" >/dev/null
scripts/bench.sh "$@" --base plain --json "$out/vsplain.json" >/dev/null
python3 scripts/bench/compare.py "$out/capture.json" "$out/vsplain.json" --json "$out/compare.json"
