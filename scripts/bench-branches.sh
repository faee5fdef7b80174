#!/usr/bin/env bash
# scripts/bench-branches.sh: what branches cost. `agx branch create` on a small and a
# large project (it must not grow with the tree), the same work in the main mount and in
# a branch alternating in one run (ratios branch/main, capture on in both), `agx merge`
# and `agx switch` of a branch with 1,000 changed files, and the layer's disk cost per
# changed byte. Timings are printed, never asserted.
#
# Usage: scripts/bench-branches.sh [--rounds N] [--files N] [--big-files N]
#                                  [--changed N] [--only create,work,switch] [--json FILE]
# Environment:
#   AGX_BIN          agx binary (default: target/release/agx, built if missing)
#   AGX_BENCH_WORK   working directory (default /var/tmp/agx-bench-work/branches); not a
#                    tmpfs
set -euo pipefail
export LC_ALL=C
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
# shellcheck source=bench/deletions.sh
. "$SCRIPT_DIR/bench/deletions.sh"

ARGS=()
JSON=""
while (($#)); do
    case $1 in
        --rounds | --files | --big-files | --changed | --only) ARGS+=("$1" "$2"); shift 2 ;;
        --json) JSON=$2; shift 2 ;;
        -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-branches.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
AGX=${AGX_BIN:-$REPO/target/release/agx}
if [[ ! -x $AGX ]]; then
    (cd "$REPO" && cargo build --release --locked >&2)
fi
WORK=${AGX_BENCH_WORK:-/var/tmp/agx-bench-work/branches}
mkdir -p "$WORK"
# ext4 without a journal creates slowly for a minute after mass deletions: wait them out.
w=$(deletions_wait "$WORK")
if ((w > 0)) && [[ $(ext4_nojournal "$WORK") == 1 ]]; then
    echo "waiting ${w}s for recent deletions in $WORK to settle (ext4 without a journal)" >&2
    sleep "$w"
fi
trap 'deletions_done "$WORK"' EXIT
[[ -n $JSON ]] && ARGS+=(--json-out "$JSON")
python3 "$SCRIPT_DIR/bench/branches.py" "$AGX" "$WORK" "${ARGS[@]}"
