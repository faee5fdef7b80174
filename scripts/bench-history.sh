#!/usr/bin/env bash
# History benchmarks: restore time of 1,000 changed files, and the store's size against the
# bytes changed and against git gc's pack of the same history. See scripts/bench/history.py.
# Usage: scripts/bench-history.sh [--files N] [--rounds N] [--edit-files N]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${AGX_BIN:-}" ] || { cargo build --release --locked --quiet; export AGX_BIN=target/release/agx; }
exec python3 scripts/bench/history.py "$@"
