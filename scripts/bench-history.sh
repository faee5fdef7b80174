#!/usr/bin/env bash
# History benchmarks: restore time of 1,000 changed files, and the store's size against the
# bytes changed and against git gc's pack of the same history. See scripts/bench/history.py.
# Usage: scripts/bench-history.sh [--files N] [--rounds N] [--edit-files N]
#
# A restore creates a file per restored path, and on ext4 without a journal recent
# deletions slow creates down: right after scripts/bench.sh a restore measured 2.5 s
# instead of 0.6 s. So it first waits as scripts/bench.sh does, and records its own
# deletions (scripts/bench/deletions.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/deletions.sh
. scripts/bench/deletions.sh
[ -n "${AGX_BIN:-}" ] || { cargo build --release --locked --quiet; export AGX_BIN=target/release/agx; }
WORK=${AGX_BENCH_WORK:-/var/tmp/agx-bench-work}
mkdir -p "$WORK"
nojournal=$(ext4_nojournal "$WORK")
if [[ $nojournal == 1 ]]; then
    wait=$(deletions_wait "$WORK")
    if ((wait > 0)); then
        echo "waiting $wait s: recent deletions still slow down creates on ext4 without a journal" >&2
        sleep "$wait"
    fi
fi
rc=0
python3 scripts/bench/history.py "$@" || rc=$?
# history.py deletes its trees as it ends.
if [[ $nojournal == 1 ]]; then deletions_done "$WORK"; fi
exit $rc
