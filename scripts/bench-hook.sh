#!/usr/bin/env bash
# `agx hook claude` latency end to end (spawned through `sh -c` with one event on stdin,
# in a mounted project, as Claude Code runs it); prints the median. See scripts/bench/hook.py.
# Usage: scripts/bench-hook.sh [--runs N]   (AGX_BIN=path to skip the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${AGX_BIN:-}" ] || { cargo build --release --locked --quiet; export AGX_BIN=target/release/agx; }
exec python3 scripts/bench/hook.py "$@"
