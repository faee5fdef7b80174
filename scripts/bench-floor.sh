#!/usr/bin/env bash
# The floor under any FUSE filesystem on this machine: the wakeup cost between CPUs, a null
# FUSE round trip, and the edit loop on a bare directory and on the plain agx mount (capture
# off), with the FUSE requests each edit waits for. See scripts/bench/floor.py.
# Usage: scripts/bench-floor.sh [--edits N] [--rounds N] [--json FILE]
#   AGX_BENCH_WORK (default /var/tmp/agx-bench-work) holds the two directories; put it on
#   the filesystem the other benchmarks use.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${AGX_BIN:-}" ] || { cargo build --release --locked --quiet; AGX_BIN=target/release/agx; }
work=${AGX_BENCH_WORK:-/var/tmp/agx-bench-work}/floor
rm -rf "$work"
mkdir -p "$work/bare" "$work/mounted"
cleanup() {
    "$AGX_BIN" unmount "$work/mounted" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
AGX_CAPTURE=0 "$AGX_BIN" mount "$work/mounted" >/dev/null
python3 scripts/bench/floor.py "$work/mounted" "$work/bare" "$@"
