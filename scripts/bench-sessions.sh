#!/usr/bin/env bash
# Session benchmarks: `agx oops` (and its redo) for sessions of 5, 100 and 1,000 changed
# files, and the cost of attribution on 10,000 small-file creates with and without a
# session. See scripts/bench/sessions.py.
# Usage: scripts/bench-sessions.sh [--rounds N] [--sizes 5,100,1000] [--creates N]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${AGX_BIN:-}" ] || { cargo build --release --locked --quiet; export AGX_BIN=target/release/agx; }
exec python3 scripts/bench/sessions.py "$@"
