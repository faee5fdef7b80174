#!/usr/bin/env bash
# History benchmarks: restore time of 1,000 changed files, and the store's size against the
# bytes changed and against git gc's pack of the same history. See scripts/bench/history.py.
# Usage: scripts/bench-history.sh [--files N] [--rounds N] [--edit-files N]
#
# On ext4 without a journal, files deleted less than about 60 s ago slow down every create
# in their block group, and a restore creates a file per restored path: a run right after
# scripts/bench.sh (or after this script) measured 2.5 s instead of 0.6 s. So, as
# scripts/bench.sh does, it first waits until the last deletion in the work directory is
# 65 s old, and records its own.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${AGX_BIN:-}" ] || { cargo build --release --locked --quiet; export AGX_BIN=target/release/agx; }
WORK=${AGX_BENCH_WORK:-/var/tmp/agx-bench-work}
mkdir -p "$WORK"
ext4_nojournal=0
if [[ $(stat -f -c %T "$WORK") == ext2/ext3 ]]; then   # stat's name for ext4 too
    src=$(findmnt -no SOURCE --target "$WORK" 2>/dev/null || true)
    if [[ -n $src ]] && ! compgen -G "/proc/fs/jbd2/$(basename "$src")-*" >/dev/null; then
        ext4_nojournal=1
    fi
fi
if [[ $ext4_nojournal == 1 && -f $WORK/.last-delete ]]; then
    age=$(($(date +%s) - $(cat "$WORK/.last-delete")))
    if ((age < 65)); then
        echo "waiting $((65 - age)) s: files deleted $age s ago still slow down creates on ext4 without a journal" >&2
        sleep $((65 - age))
    fi
fi
rc=0
python3 scripts/bench/history.py "$@" || rc=$?
# history.py deletes its trees when it ends.
if [[ $ext4_nojournal == 1 ]]; then date +%s >"$WORK/.last-delete"; fi
exit $rc
