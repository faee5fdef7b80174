#!/usr/bin/env bash
# scripts/bench.sh: measures what agx costs. Each workload runs on a bare copy of a
# directory and on a copy over-mounted with `agx mount`, alternating bare/agx for several
# rounds, and the median wall times and the ratio agx/bare are printed per workload,
# followed by a JSON summary. `scripts/bench.sh --help` explains everything.
#
# Environment:
#   AGX_BIN            agx binary to use (default: target/release/agx, built if missing)
#   AGX_BENCH_CACHE    fixtures, built once (default /var/tmp/agx-bench)
#   AGX_BENCH_WORK     working copies, one per run (default /var/tmp/agx-bench-work)
#   Anything else is inherited by `agx mount` and so by its daemon, e.g.
#     AGX_PASSTHROUGH=0 scripts/bench.sh    # daemon serves reads/writes itself
#     AGX_THREADS=8 scripts/bench.sh        # daemon request threads (default 4)
set -euo pipefail
export LC_ALL=C

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HELPERS=$SCRIPT_DIR/bench
# shellcheck source=bench/deletions.sh
. "$HELPERS/deletions.sh"
# Bump when a fixture's recipe changes: fixtures with another version are rebuilt.
FIXTURE_VERSION=1

# rmrf runs last: its timed deletions would slow the creates of the workloads after it
# on ext4 without a journal (see "Deletions" in --help).
ALL_WORKLOADS=(untar git bigfile smallfiles cargo sqlite rewrite rmrf)
ROUNDS=5
WARMUP=1
ONLY=""
JSON_OUT=""
CACHE=${AGX_BENCH_CACHE:-/var/tmp/agx-bench}
WORK=${AGX_BENCH_WORK:-/var/tmp/agx-bench-work}
DROP_CACHES=0
FUSE_STATS=0
BASE=bare
REBUILD_FIXTURES=0
FORCE_BUILD=0

usage() {
    cat <<'EOF'
Usage: scripts/bench.sh [OPTIONS]

Runs each workload on a bare copy of a directory and through `agx mount` (the copy is
over-mounted in place), alternating bare/agx (odd rounds bare first, even rounds agx
first) for N rounds, then prints the median wall time of each variant and the ratio
agx/bare per measurement, and a JSON summary (one line, last line of stdout). Progress
goes to stderr.

Options:
  --rounds N            rounds per workload (default 5)
  --warmup N            untimed warm-up rounds (bare and agx) per workload before the
                        measured ones, to fault in memory and caches (default 1)
  --only NAME[,NAME]    run only these workloads (default: all; see --list)
  --json FILE           also write the JSON summary (indented) to FILE
  --cache DIR           fixture cache (default ${AGX_BENCH_CACHE:-/var/tmp/agx-bench})
  --work DIR            working copies (default ${AGX_BENCH_WORK:-/var/tmp/agx-bench-work})
  --drop-caches         also drop the kernel caches (sync; echo 3 > drop_caches) right
                        before every timed step, in both variants (default: only before
                        the 1 GiB read)
  --base plain          measure the baseline variant ("bare" in the table and JSON) on a
                        plain agx mount (AGX_CAPTURE=0) instead of the bare directory,
                        so the ratio is what capture adds, alternating in one run
                        (default: bare). Used by scripts/bench-capture.sh.
  --fuse-stats          count the FUSE requests of every timed step of the agx runs
                        (kernel tracepoint fuse:fuse_request_send, filtered to the
                        mount, via a private tracefs instance); printed after the table
                        and put in the JSON ("fuse_requests", first measured round).
                        Tracing costs a little time in the agx runs.
  --rebuild-fixtures    rebuild the fixtures even if cached
  --build               run `cargo build --release` first even if the binary exists
  --list                list the workloads and exit
  -h, --help            this help

Environment:
  AGX_BIN          the agx binary (default: <repo>/target/release/agx, built with
                   `cargo build --release` if missing)
  AGX_BENCH_CACHE  fixture cache directory (default /var/tmp/agx-bench)
  AGX_BENCH_WORK   working directory (default /var/tmp/agx-bench-work); must be on the
                   same filesystem as the cache and not a tmpfs
  Every other variable is inherited by `agx mount` and its daemon, so daemon knobs
  just work, e.g.  AGX_PASSTHROUGH=0 scripts/bench.sh   (no FUSE passthrough)
                   AGX_THREADS=8 scripts/bench.sh       (daemon request threads)
  The values of AGX_PASSTHROUGH and AGX_THREADS are recorded in the JSON.

Each run (one workload, one variant, one round):
  1. a fresh copy of the workload's input is made in WORK/p-NAME   (not timed)
  2. sync                                                          (not timed)
  3. agx variant only: `agx mount WORK/p-NAME`                     (not timed)
  4. the workload's timed steps; checks of the result              (checks not timed)
  5. agx variant only: `agx unmount WORK/p-NAME`     (timed apart, never in a ratio)
  6. the copy is moved to WORK/trash, deleted at the end           (not timed)
Before the measured rounds, --warmup rounds (default 1) run the same way and are
discarded. The unmount time (step 5) is reported per workload after the table and as
agx_unmount_median_s in the JSON: work that the daemon defers, such as closing the
descriptors it holds for deleted files, shows up there. When FUSE mounts other than this
script's exist during a run (a test suite, another agx), a note is logged and the JSON
counts those runs (runs_with_other_fuse_mounts): on a 2-core machine they skew timings.
Commands run with their working directory inside the (mounted) copy. Timing is wall
clock ($EPOCHREALTIME) around the command, or measured inside the Python helpers
around their loop (interpreter start excluded).

Workloads (--only names) and the measurements they report:
  untar       untar      tar -xf of an uncompressed tarball of a synthetic source tree
                         (5,000 files in 300 dirs, 1-20 KiB each, ~42 MB) into the
                         empty copy; checked with `tar --diff` afterwards
  git         git_status_cold  first `git status` after the mount (agx) / first
                         `git status` in a fresh process after the copy was made (bare).
                         Page cache is warm in both (the copy was just written); before
                         the mount the index was refreshed on the bare copy, so "cold"
                         means: fresh mount (empty FUSE dentry/attr caches, new daemon),
                         plus whatever the mount changes for git (e.g. inode numbers).
              git_status_warm  the second `git status`, right after the first
              git_checkout     `git checkout v1` from v2 (1,000 files differ: 900
                         modified, 50 added, 50 deleted), after the two status runs;
                         the repo has 5,000 files and 11 commits, packed
  bigfile     write_1g   dd if=/dev/zero bs=1M count=1024 conv=fsync
              read_1g    dd to /dev/null bs=1M, after sync + drop_caches (if /proc
                         allows it; the JSON says whether caches were dropped)
  smallfiles  create_10k create 10,000 files of 256 bytes in 100 dirs
                         (open O_CREAT|O_EXCL + write + close; mkdirs included)
              stat_10k   stat() of the same 10,000 files, right after, same process
  cargo       cargo_clean  `cargo build --offline` (debug) of a small binary crate
                         using serde+derive, serde_json, itoa and memchr (deps fetched
                         once into CACHE/cargo-home, used as CARGO_HOME), with
                         CARGO_TARGET_DIR inside the copy, so all output goes through
                         the mount
              cargo_incr touch src/main.rs, build again
  sqlite      sqlite_2000  2,000 transactions of one INSERT each, journal_mode=DELETE,
                         synchronous=FULL (SQLite's default), Python's sqlite3
  rewrite     rewrite_inplace_1000  1,000 read + rewrite-in-place (O_TRUNC + write)
                         of existing source files (the 5,000-file tree)
              rewrite_rename_1000   1,000 read + write a temp file + rename over the
                         original (how editors and agents save)
  rmrf        rm_rf_20k  `rm -rf` of a 20,000-file tree (1,000 dirs, 0.5-8 KiB files)
                         that was extracted before the mount

Deletions: on ext4 without a journal (as on some VMs), every create skips, slowly, the
inodes of its block group deleted less than 60 s ago. So the working copies are only
deleted at the end, rmrf (which deletes 20,000 files in its timed step) runs last, the
fixtures keep their generated trees, and a run started within 65 s of the previous
one's final deletion first waits. The JSON records whether WORK is such a filesystem.

Cleanup: a trap on EXIT, INT, TERM and HUP unmounts every agx mount under the work
directory (falling back to a lazy unmount, then stopping the daemons this script
started, by pid) and deletes the working copies. Per-run logs stay in WORK/logs/.
Exit status: 0 if every run succeeded, 1 if a run failed (the others still run), 2 on
a usage error, 130 when interrupted.
EOF
}

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# ---------------------------------------------------------------- arguments

while [[ $# -gt 0 ]]; do
    case $1 in
    --rounds) ROUNDS=${2:?--rounds needs a number}; shift 2 ;;
    --rounds=*) ROUNDS=${1#*=}; shift ;;
    --warmup) WARMUP=${2:?--warmup needs a number}; shift 2 ;;
    --warmup=*) WARMUP=${1#*=}; shift ;;
    --only) ONLY=${2:?--only needs a list}; shift 2 ;;
    --only=*) ONLY=${1#*=}; shift ;;
    --json) JSON_OUT=${2:?--json needs a file}; shift 2 ;;
    --json=*) JSON_OUT=${1#*=}; shift ;;
    --cache) CACHE=${2:?--cache needs a directory}; shift 2 ;;
    --cache=*) CACHE=${1#*=}; shift ;;
    --work) WORK=${2:?--work needs a directory}; shift 2 ;;
    --work=*) WORK=${1#*=}; shift ;;
    --drop-caches) DROP_CACHES=1; shift ;;
    --fuse-stats) FUSE_STATS=1; shift ;;
    --base) BASE=${2:?--base needs bare or plain}; shift 2 ;;
    --base=*) BASE=${1#*=}; shift ;;
    --rebuild-fixtures) REBUILD_FIXTURES=1; shift ;;
    --build) FORCE_BUILD=1; shift ;;
    --list) printf '%s\n' "${ALL_WORKLOADS[@]}"; exit 0 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

if ! [[ $ROUNDS =~ ^[1-9][0-9]*$ ]]; then
    echo "bench.sh: --rounds must be a positive integer, not '$ROUNDS'" >&2
    exit 2
fi
if [[ $BASE != bare && $BASE != plain ]]; then
    echo "bench.sh: --base must be bare or plain, not '$BASE'" >&2
    exit 2
fi
if ! [[ $WARMUP =~ ^[0-9]+$ ]]; then
    echo "bench.sh: --warmup must be a non-negative integer, not '$WARMUP'" >&2
    exit 2
fi
WORKLOADS=()
if [[ -z $ONLY ]]; then
    WORKLOADS=("${ALL_WORKLOADS[@]}")
else
    IFS=, read -r -a wanted <<<"$ONLY"
    for w in "${wanted[@]}"; do
        [[ -z $w ]] && continue
        if [[ " ${ALL_WORKLOADS[*]} " != *" $w "* ]]; then
            echo "bench.sh: unknown workload '$w' (one of: ${ALL_WORKLOADS[*]})" >&2
            exit 2
        fi
    done
    for w in "${ALL_WORKLOADS[@]}"; do
        [[ ",$ONLY," == *",$w,"* ]] && WORKLOADS+=("$w")
    done
    [[ ${#WORKLOADS[@]} -gt 0 ]] || { echo "bench.sh: --only selected nothing" >&2; exit 2; }
fi
if [[ -n $JSON_OUT ]]; then
    JSON_OUT=$(realpath -m -- "$JSON_OUT")
fi

# Nothing of ours may keep a working directory inside a mount.
cd /

# ---------------------------------------------------------------- timing and records

# Wall-clock seconds since the epoch, microsecond resolution, without a fork.
now() {
    if [[ -n ${EPOCHREALTIME:-} ]]; then
        printf '%s\n' "$EPOCHREALTIME"
    else
        date +%s.%N
    fi
}

# The current run, set by run_one (in its subshell).
GROUP="" VARIANT="" ROUND="" RUN_LOG=/dev/null

# record METRIC SECONDS: one measurement of the current run (warm-up rounds, numbered
# -1, -2, ..., are recorded too; the summary ignores them).
record() {
    printf '%s\t%s\t%s\t%s\t%s\n' "$GROUP" "$1" "$VARIANT" "$ROUND" "$2" >>"$RESULTS"
    log "  $VARIANT $1: $2 s"
}

# timed METRIC CMD...: runs CMD (output to the run's log) and records its wall time.
# A failing CMD fails the run.
timed() {
    local metric=$1 t0 t1
    shift
    fuse_trace_begin
    t0=${EPOCHREALTIME:-$(date +%s.%N)}
    "$@" >>"$RUN_LOG" 2>&1
    t1=${EPOCHREALTIME:-$(date +%s.%N)}
    fuse_trace_end "$metric"
    record "$metric" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')"
}

# py_metrics SCRIPT ARGS...: runs a helper that prints `METRIC SECONDS` lines.
py_metrics() {
    local out metric secs names=()
    fuse_trace_begin
    out=$(python3 "$HELPERS/$1" "${@:2}" 2>>"$RUN_LOG")
    printf '%s\n' "$out" >>"$RUN_LOG"
    while read -r metric secs; do
        [[ -n $metric ]] || continue
        record "$metric" "$secs"
        names+=("$metric")
    done <<<"$out"
    fuse_trace_end "$(IFS=+; echo "${names[*]}")"
}

# ---------------------------------------------------------------- FUSE request counts

TRACE_INSTANCE=""   # set by preflight with --fuse-stats
FUSE_CONN=""        # the kernel's connection number of the current mount

fuse_trace_begin() {
    [[ $FUSE_STATS == 1 && $VARIANT == agx && -n $FUSE_CONN ]] || return 0
    local ev=$TRACE_INSTANCE/events/fuse/fuse_request_send
    echo 0 >"$ev/enable"
    echo >"$TRACE_INSTANCE/trace"   # clears the buffer
    echo "connection == $FUSE_CONN" >"$ev/filter"
    echo 1 >"$ev/enable"
}

# fuse_trace_end LABEL: stops tracing, appends the opcode counts to WORK/fuse.tsv.
fuse_trace_end() {
    [[ $FUSE_STATS == 1 && $VARIANT == agx && -n $FUSE_CONN ]] || return 0
    echo 0 >"$TRACE_INSTANCE/events/fuse/fuse_request_send/enable"
    local counts lost
    counts=$(grep -o '(FUSE_[A-Z0-9_]*)' "$TRACE_INSTANCE/trace" | tr -d '()' | sed 's/^FUSE_//' |
        sort | uniq -c | sort -rn | awk '{ printf "%s%s=%s", (NR > 1 ? "," : ""), $2, $1 }')
    lost=$(cat "$TRACE_INSTANCE"/per_cpu/cpu*/stats 2>/dev/null | awk '/^overrun:/ { n += $2 } END { print n + 0 }')
    printf '%s\t%s\t%s\t%s\t%s\n' "$GROUP" "$1" "$ROUND" "${counts:-none}" "$lost" >>"$WORK/fuse.tsv"
}

fuse_trace_setup() {
    local t=/sys/kernel/tracing
    if [[ ! -d $t/events ]]; then
        mount -t tracefs nodev "$t" 2>/dev/null || true
    fi
    [[ -d $t/events/fuse/fuse_request_send ]] ||
        die "--fuse-stats needs tracefs with the fuse:fuse_request_send event (root, kernel 6.x)"
    TRACE_INSTANCE=$t/instances/agx-bench-$$
    mkdir "$TRACE_INSTANCE" || die "cannot create the tracefs instance $TRACE_INSTANCE"
    echo 65536 >"$TRACE_INSTANCE/buffer_size_kb"
}

fuse_trace_teardown() {
    [[ -n $TRACE_INSTANCE && -d $TRACE_INSTANCE ]] || return 0
    echo 0 >"$TRACE_INSTANCE/events/fuse/fuse_request_send/enable" 2>/dev/null || true
    rmdir "$TRACE_INSTANCE" 2>/dev/null || log "could not remove $TRACE_INSTANCE"
}

drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

can_drop_caches() {
    [[ -w /proc/sys/vm/drop_caches ]] && (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null
}

# Before each timed step: drop caches if --drop-caches was given.
before_timed() {
    if [[ $DROP_CACHES == 1 ]]; then drop_caches; fi
}

check() { # check DESCRIPTION CMD...: a functional check of a result, not timed
    local what=$1
    shift
    if ! "$@" >>"$RUN_LOG" 2>&1; then
        echo "check failed ($VARIANT): $what" >>"$RUN_LOG"
        log "  CHECK FAILED ($VARIANT, round $ROUND): $what"
        return 1
    fi
}

# ---------------------------------------------------------------- agx

AGX=${AGX_BIN:-$REPO/target/release/agx}
PIDS_FILE=""   # daemons this script started, one pid per line

agx_mount() {
    local dir=$1 out pid mode dlog
    out=$("$AGX" --json mount "$dir" 2>>"$RUN_LOG")
    read -r pid mode dlog < <(printf '%s' "$out" | python3 -c \
        'import json,sys; s=json.load(sys.stdin); print(s["pid"], s["mode"], s.get("log",""))')
    echo "$pid" >>"$PIDS_FILE"
    printf '%s\n' "$mode" >"$WORK/.agx-mode"
    printf '%s\n' "$dlog" >"$WORK/.daemon-log"
    printf 'agx mount: pid %s, mode %s, log %s\n' "$pid" "$mode" "$dlog" >>"$RUN_LOG"
    if [[ $FUSE_STATS == 1 ]]; then
        local major minor
        read -r major minor < <(stat -c '%Hd %Ld' "$dir")
        FUSE_CONN=$(((major << 20) | minor))   # the kernel's dev_t of the mount
    fi
}

agx_unmount() {
    local dir=$1 _
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        if "$AGX" unmount "$dir" >>"$RUN_LOG" 2>&1; then
            return 0
        fi
        sleep 0.5
    done
    return 1
}

# The agx mountpoints under WORK, from /proc/mounts.
agx_mounts_under_work() {
    local src mp fstype rest
    while read -r src mp fstype rest; do
        mp=$(printf '%b' "$mp")
        if [[ $fstype == fuse.agx && ($mp == "$WORK" || $mp == "$WORK"/*) ]]; then
            printf '%s\n' "$mp"
        fi
    done </proc/mounts
}

is_mounted() {
    local mp
    while read -r mp; do
        [[ $mp == "$1" ]] && return 0
    done < <(agx_mounts_under_work)
    return 1
}

pid_is_agx() { # pid_is_agx PID: alive and running the agx binary (guards against reuse)
    [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q 'agx.* mount '
}

# Unmounts MP by every means needed; never fails.
force_unmount() {
    local mp=$1
    "$AGX" unmount "$mp" >/dev/null 2>&1 && return 0
    sleep 1
    "$AGX" unmount "$mp" >/dev/null 2>&1 && return 0
    log "unmount of $mp failed; detaching it lazily"
    "$AGX" unmount --lazy "$mp" >/dev/null 2>&1 || umount -l "$mp" 2>/dev/null ||
        fusermount3 -uz "$mp" 2>/dev/null || log "could not unmount $mp"
}

# Stops the daemons this script started that are still running.
stop_daemons() {
    [[ -n $PIDS_FILE && -f $PIDS_FILE ]] || return 0
    local pid _
    while read -r pid; do
        [[ -n $pid ]] || continue
        for _ in $(seq 50); do
            pid_is_agx "$pid" || break
            sleep 0.1
        done
        if pid_is_agx "$pid"; then
            log "daemon $pid still running; sending SIGTERM"
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do
                pid_is_agx "$pid" || break
                sleep 0.1
            done
            if pid_is_agx "$pid"; then
                log "daemon $pid ignores SIGTERM; sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
    done <"$PIDS_FILE"
}

# Unmounts everything under WORK, stops our daemons, deletes the working copies (and the
# retired ones in WORK/trash).
cleanup_work() {
    local mp p deleted=0
    [[ -d $WORK ]] || return 0
    while read -r mp; do
        if [[ -n $mp ]]; then force_unmount "$mp"; fi
    done < <(agx_mounts_under_work)
    stop_daemons
    for p in "$WORK"/p-* "$WORK"/trash; do
        [[ -e $p ]] || continue
        if is_mounted "$p"; then
            log "not deleting $p: still mounted"
        else
            rm -rf -- "$p"
            deleted=1
        fi
    done
    if [[ $deleted == 1 ]]; then
        deletions_done "$WORK"
    fi
}

# Moves a finished working copy to WORK/trash; it is deleted when the script ends.
retire() {
    mkdir -p "$WORK/trash"
    rm -f -- "$1/big"   # the 1 GiB file: one inode, no need to keep its blocks around
    mv -- "$1" "$WORK/trash/$GROUP-$VARIANT-$ROUND"
}

# Waits until the deletions of an earlier run (of this script or bench-history.sh) no
# longer slow down creates (see scripts/bench/deletions.sh).
settle_deletions() {
    local wait
    [[ $EXT4_NOJOURNAL == 1 ]] || return 0
    wait=$(deletions_wait "$WORK")
    if ((wait > 0)); then
        log "waiting $wait s: recent deletions still slow down creates on ext4 without a journal"
        sleep "$wait"
    fi
}

CLEANED=0
on_exit() {
    local rc=$?
    trap - EXIT INT TERM HUP
    cd /
    if [[ $CLEANED == 0 ]]; then
        CLEANED=1
        cleanup_work || true
    fi
    fuse_trace_teardown
    if [[ -n $(agx_mounts_under_work 2>/dev/null) ]]; then
        log "WARNING: agx mounts are left under $WORK: $(agx_mounts_under_work | tr '\n' ' ')"
    fi
    exit "$rc"
}
on_signal() {
    log "interrupted by SIG$1; cleaning up"
    exit 130
}
trap on_exit EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP

# ---------------------------------------------------------------- fixtures

# fixture NAME BUILDER: builds CACHE/NAME with BUILDER TMPDIR unless it is up to date.
fixture() {
    local name=$1 builder=$2 stamp="$CACHE/$1.ok" tmp="$CACHE/$1.tmp"
    if [[ $REBUILD_FIXTURES == 0 && -e $CACHE/$name && -f $stamp &&
        $(cat "$stamp") == "$FIXTURE_VERSION" ]]; then
        return 0
    fi
    log "building fixture $name"
    local t0
    t0=$(now)
    rm -rf -- "$tmp" "${CACHE:?}/$name" "$stamp"
    mkdir -p "$tmp"
    "$builder" "$tmp"
    mv "$tmp" "$CACHE/$name"
    echo "$FIXTURE_VERSION" >"$stamp"
    log "fixture $name ready ($(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s)"
}

# A tarball of a deterministic tree: TMP/src.tar, TMP/src.list (paths inside src/).
build_src5k() {
    python3 "$HELPERS/gentree.py" "$1/src" --files 5000 --dirs 300 --seed 1 \
        --min-kb 1 --max-kb 20 --manifest "$1/src.list"
    tar --sort=name --mtime=@1700000000 --owner=0 --group=0 --numeric-owner \
        -C "$1" -cf "$1/src.tar" src
}

build_tree20k() {
    python3 "$HELPERS/gentree.py" "$1/tree" --files 20000 --dirs 1000 --seed 2 \
        --min-kb 0.5 --max-kb 8
    tar --sort=name --mtime=@1700000000 --owner=0 --group=0 --numeric-owner \
        -C "$1" -cf "$1/tree.tar" tree
}

build_git5k() {
    python3 "$HELPERS/make_git_fixture.py" "$1/repo" --files 5000 --dirs 300
}

build_crate() {
    local d=$1/crate
    mkdir -p "$d/src" "$1/cargo-home"
    cat >"$d/Cargo.toml" <<'EOF'
[package]
name = "agx-bench-crate"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
serde = { version = "1", features = ["derive"] }
serde_json = "1"
itoa = "1"
memchr = "2"
EOF
    cat >"$d/src/main.rs" <<'EOF'
//! A small program for the agx cargo benchmark: uses every dependency.
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Record {
    name: String,
    count: u64,
    tags: Vec<String>,
}

fn main() {
    let rec = Record { name: "agx".into(), count: 42, tags: vec!["a".into(), "b".into()] };
    let json = serde_json::to_string(&rec).expect("serialize");
    let back: Record = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(rec, back);
    let mut buf = itoa::Buffer::new();
    let n = buf.format(back.count);
    let commas = memchr::memchr_iter(b',', json.as_bytes()).count();
    println!("{json} {n} {commas}");
}
EOF
    # Resolve and download the dependencies once; builds run --offline from here on.
    (cd "$d" && CARGO_HOME="$1/cargo-home" cargo generate-lockfile -q &&
        CARGO_HOME="$1/cargo-home" cargo fetch -q)
}

fixture_for() {
    case $1 in
    untar | rewrite) fixture src5k build_src5k ;;
    rmrf) fixture tree20k build_tree20k ;;
    git) fixture git5k build_git5k ;;
    cargo) fixture crate build_crate ;;
    *) ;;
    esac
}

# ---------------------------------------------------------------- workloads
# prepare_NAME DIR: makes the input in DIR (not timed, before the mount).
# measure_NAME DIR: the timed steps and their checks (after the mount).

prepare_untar() { :; }
measure_untar() {
    before_timed
    timed untar tar -xf "$CACHE/src5k/src.tar" -C "$1"
    check "untarred tree equals the tarball" tar --diff -f "$CACHE/src5k/src.tar" -C "$1"
}

git_in() { # git_in DIR ARGS...: git with a fixed, minimal configuration
    GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -C "$@"
}
prepare_git() {
    cp -a "$CACHE/git5k/repo/." "$1/"
    # The copy's index has the fixture's stat data: refresh it on the bare copy, so the
    # first timed status does not re-hash everything because of the copy itself.
    git_in "$1" status >/dev/null
}
measure_git() {
    before_timed
    timed git_status_cold git_in "$1" status
    before_timed
    timed git_status_warm git_in "$1" status
    before_timed
    timed git_checkout git_in "$1" checkout -q v1
    check "checkout v1 leaves a clean tree" test -z "$(git_in "$1" status --porcelain)"
    check "HEAD is v1" test "$(git_in "$1" rev-parse HEAD)" = "$(git_in "$1" rev-parse 'v1^{commit}')"
    check "work tree matches v1" git_in "$1" diff --quiet v1
}

prepare_rmrf() { tar -xf "$CACHE/tree20k/tree.tar" -C "$1"; }
measure_rmrf() {
    before_timed
    timed rm_rf_20k rm -rf "$1/tree"
    check "tree is gone" test ! -e "$1/tree"
}

prepare_bigfile() { :; }
measure_bigfile() {
    before_timed
    timed write_1g dd if=/dev/zero of="$1/big" bs=1M count=1024 conv=fsync status=none
    check "file is 1 GiB" test "$(stat -c %s "$1/big")" = 1073741824
    if [[ $CAN_DROP == 1 ]]; then drop_caches; fi
    timed read_1g dd if="$1/big" of=/dev/null bs=1M status=none
}

prepare_smallfiles() { :; }
measure_smallfiles() {
    before_timed
    py_metrics smallfiles.py "$1" --files 10000 --per-dir 100 --size 256
}

cargo_in() { # cargo_in DIR ARGS...
    (cd "$1" && env -u RUSTC_WRAPPER -u CARGO_BUILD_TARGET_DIR \
        CARGO_HOME="$CACHE/crate/cargo-home" CARGO_TARGET_DIR="$1/target" \
        cargo "${@:2}")
}
prepare_cargo() { cp -a "$CACHE/crate/crate/." "$1/"; }
measure_cargo() {
    local bin=$1/target/debug/agx-bench-crate m0
    before_timed
    timed cargo_clean cargo_in "$1" build --offline --locked
    check "the built program runs" "$bin"
    m0=$(stat -c %Y.%y "$bin")
    touch "$1/src/main.rs"
    before_timed
    timed cargo_incr cargo_in "$1" build --offline --locked
    check "the incremental build relinked the program" test "$(stat -c %Y.%y "$bin")" != "$m0"
    check "the rebuilt program runs" "$bin"
}

prepare_sqlite() { :; }
measure_sqlite() {
    before_timed
    py_metrics sqlite_commits.py "$1" --commits 2000
}

prepare_rewrite() { tar -xf "$CACHE/src5k/src.tar" -C "$1"; }
measure_rewrite() {
    before_timed
    py_metrics rewrite.py "$1/src" "$CACHE/src5k/src.list" --count 2000
    check "no temporary files left" test -z "$(find "$1/src" -name '*.agxbench.tmp' -print -quit)"
}

# ---------------------------------------------------------------- runs

# run_one WORKLOAD VARIANT ROUND: one run, in a subshell with `set -e` in force.
run_one() {
    GROUP=$1 VARIANT=$2 ROUND=$3
    local dir=$WORK/p-$1
    RUN_LOG=$WORK/logs/$1-$2-$3.log
    : >"$RUN_LOG"
    : >"$WORK/.daemon-log"
    if [[ -e $dir ]]; then
        is_mounted "$dir" && force_unmount "$dir"
        rm -rf -- "$dir"
    fi
    mkdir -p "$dir"
    "prepare_$1" "$dir"
    sync
    if [[ $VARIANT == agx ]]; then
        agx_mount "$dir"
    elif [[ $BASE == plain ]]; then
        AGX_CAPTURE=0 agx_mount "$dir"
    fi
    "measure_$1" "$dir"
    if [[ $VARIANT == bare && $BASE == plain ]]; then
        agx_unmount "$dir"
    fi
    if [[ $VARIANT == agx ]]; then
        # Not part of any ratio, but recorded: work the daemon deferred (e.g. closing the
        # descriptors of deleted files) shows up here.
        local t0=$EPOCHREALTIME
        agx_unmount "$dir"
        record "(unmount)" "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.6f", b - a }')"
    fi
    retire "$dir"
}

# FUSE mounts that are not ours: a sign that something else (a test suite) runs now.
other_fuse_mounts() {
    local src mp fstype rest
    while read -r src mp fstype rest; do
        mp=$(printf '%b' "$mp")
        if [[ $fstype == fuse* && $mp != "$WORK"/* && $fstype != fuse.lxcfs && $fstype != fusectl ]]; then
            printf '%s\n' "$mp"
        fi
    done </proc/mounts
}

FAILED=0
OTHER_FUSE_RUNS=0
run_workload() {
    local wl=$1 r v order rc dlog
    for ((r = -WARMUP; r <= ROUNDS; r++)); do
        ((r == 0)) && continue
        if ((r % 2)); then order=(bare agx); else order=(agx bare); fi
        for v in "${order[@]}"; do
            if ((r < 0)); then
                log "$wl: warm-up $((-r))/$WARMUP, $v (not counted)"
            else
                log "$wl: round $r/$ROUNDS, $v"
            fi
            if [[ -n $(other_fuse_mounts) ]]; then
                OTHER_FUSE_RUNS=$((OTHER_FUSE_RUNS + 1))
                log "note: other FUSE mounts exist (another agx or test suite is busy?): results may be noisy"
            fi
            set +e
            (
                set -e
                run_one "$wl" "$v" "$r"
            )
            rc=$?
            set -e
            if [[ $rc != 0 ]]; then
                FAILED=1
                printf '%s\t-\t%s\t%s\tFAIL\n' "$wl" "$v" "$r" >>"$RESULTS"
                log "$wl: round $r, $v FAILED (exit $rc); last lines of $WORK/logs/$wl-$v-$r.log:"
                tail -n 15 "$WORK/logs/$wl-$v-$r.log" | sed 's/^/    | /' >&2
                dlog=$(cat "$WORK/.daemon-log" 2>/dev/null || true)
                if [[ $v == agx && -n $dlog && -s $dlog ]]; then
                    log "daemon log $dlog:"
                    tail -n 15 "$dlog" | sed 's/^/    | /' >&2
                fi
                cleanup_work
            fi
        done
    done
}

# ---------------------------------------------------------------- main

preflight() {
    local c
    for c in python3 tar dd git awk; do
        command -v "$c" >/dev/null || die "$c is required"
    done
    if [[ " ${WORKLOADS[*]} " == *" cargo "* ]]; then
        command -v cargo >/dev/null || die "cargo is required for the cargo workload"
    fi
    [[ -e /dev/fuse ]] || die "/dev/fuse is missing"

    if [[ -z ${AGX_BIN:-} && ($FORCE_BUILD == 1 || ! -x $AGX) ]]; then
        log "building agx: cargo build --release"
        (cd "$REPO" && cargo build --release) >&2
    fi
    [[ -x $AGX ]] || die "agx binary not found or not executable: $AGX"
    AGX=$(realpath "$AGX")
    # target/ may be shared with other builds: note which binary ran, and whether it changed.
    AGX_SHA_START=$(sha256sum "$AGX" | cut -c1-16)
    AGX_MTIME=$(date -u -r "$AGX" +%Y-%m-%dT%H:%M:%SZ)
    REPO_HEAD=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
    REPO_DIRTY=false
    if [[ -n $(git -C "$REPO" status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null) ]]; then
        REPO_DIRTY=true
    fi

    mkdir -p "$CACHE" "$WORK" "$WORK/logs"
    CACHE=$(realpath "$CACHE")
    WORK=$(realpath "$WORK")
    [[ $WORK != "$CACHE" && $WORK != "$CACHE"/* && $CACHE != "$WORK"/* ]] ||
        die "the cache ($CACHE) and the work directory ($WORK) must not contain each other"
    local t
    for d in "$CACHE" "$WORK"; do
        t=$(stat -f -c %T "$d")
        [[ $t != tmpfs && $t != ramfs ]] ||
            die "$d is on $t; use a disk-backed directory (set AGX_BENCH_CACHE / AGX_BENCH_WORK)"
    done
    if [[ $(stat -c %d "$CACHE") != $(stat -c %d "$WORK") ]]; then
        log "warning: $CACHE and $WORK are on different filesystems"
    fi
    if [[ -n $(agx_mounts_under_work) ]]; then
        log "removing agx mounts left under $WORK by an earlier run"
    fi
    EXT4_NOJOURNAL=$(ext4_nojournal "$WORK")
    PIDS_FILE=$WORK/.pids
    : >"$PIDS_FILE"
    cleanup_work
    RESULTS=$WORK/results.tsv
    : >"$RESULTS"
    rm -f "$WORK/fuse.tsv"
    if [[ $FUSE_STATS == 1 ]]; then fuse_trace_setup; fi
    : >"$WORK/.agx-mode"
    CAN_DROP=0
    if can_drop_caches; then CAN_DROP=1; fi
    if [[ $DROP_CACHES == 1 && $CAN_DROP == 0 ]]; then
        die "--drop-caches: cannot write /proc/sys/vm/drop_caches (needs root)"
    fi
}

write_meta() {
    local sha_end
    sha_end=$(sha256sum "$AGX" 2>/dev/null | cut -c1-16)
    if [[ $sha_end != "$AGX_SHA_START" ]]; then
        log "WARNING: $AGX changed during the run (another build?): results may mix two binaries"
    fi
    SHA_START=$AGX_SHA_START SHA_END=$sha_end ROUNDS=$ROUNDS WARMUP=$WARMUP WORKLOADS="${WORKLOADS[*]}" AGX="$AGX" COMMIT=$REPO_HEAD DIRTY=$REPO_DIRTY AGX_MTIME=$AGX_MTIME \
        MODE=$(cat "$WORK/.agx-mode" 2>/dev/null || true) CAN_DROP=$CAN_DROP \
        DROP_ALL=$DROP_CACHES BASE=$BASE NOJOURNAL=$EXT4_NOJOURNAL OTHER_FUSE_RUNS=$OTHER_FUSE_RUNS LOAD_START="$LOAD_START" LOAD_END="$LOAD_END" CACHE="$CACHE" WORK="$WORK" \
        AGX_VERSION=$("$AGX" --version 2>/dev/null || true) python3 - "$1" <<'EOF'
import json, os, platform, sys
e = os.environ
meta = {
    "rounds": int(e["ROUNDS"]),
    "warmup_rounds": int(e["WARMUP"]),
    "workloads": e["WORKLOADS"].split(),
    "agx_bin": e["AGX"],
    "agx_version": e["AGX_VERSION"],
    "agx_bin_sha256_prefix": e["SHA_START"],
    "agx_bin_changed_during_run": e["SHA_START"] != e["SHA_END"],
    "agx_bin_mtime": e["AGX_MTIME"],
    "repo_head_at_start": e["COMMIT"],
    "repo_src_dirty_at_start": e["DIRTY"] == "true",
    "agx_mode": e["MODE"] or None,
    "daemon_env": {k: e.get(k) for k in ("AGX_PASSTHROUGH", "AGX_THREADS", "AGX_CAPTURE")},
    "base": "plain agx mount (AGX_CAPTURE=0)" if e["BASE"] == "plain" else "bare directory",
    "kernel": platform.release(),
    "cpus": os.cpu_count(),
    "loadavg_start": e["LOAD_START"],
    "loadavg_end": e["LOAD_END"],
    "runs_with_other_fuse_mounts": int(e["OTHER_FUSE_RUNS"]),
    "cache": e["CACHE"],
    "work": e["WORK"],
    "read_1g_after_drop_caches": e["CAN_DROP"] == "1",
    "drop_caches_before_every_step": e["DROP_ALL"] == "1",
    "work_fs_ext4_without_journal": e["NOJOURNAL"] == "1",
    "cold_means": "git_status_cold: first `git status` after a fresh `agx mount` (agx) or "
                  "first in a fresh process after the copy was made and its index "
                  "refreshed (bare); page cache warm in both",
}
json.dump(meta, open(sys.argv[1], "w"))
EOF
}

main() {
    preflight
    local wl t0
    t0=$(now)
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    log "agx: $AGX (sha256 $AGX_SHA_START...); rounds: $ROUNDS (+$WARMUP warm-up); workloads: ${WORKLOADS[*]}"
    log "cache: $CACHE; work: $WORK; daemon env: AGX_PASSTHROUGH=${AGX_PASSTHROUGH-} AGX_THREADS=${AGX_THREADS-}"
    for wl in "${WORKLOADS[@]}"; do
        fixture_for "$wl"
    done
    settle_deletions
    for wl in "${WORKLOADS[@]}"; do
        local t1
        t1=$(now)
        run_workload "$wl"
        log "$wl done in $(awk -v a="$t1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
    done
    log "all done in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
    LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
    write_meta "$WORK/meta.json"
    local extra=()
    [[ -n $JSON_OUT ]] && extra+=(--json-out "$JSON_OUT")
    [[ $FUSE_STATS == 1 ]] && extra+=(--fuse "$WORK/fuse.tsv")
    python3 "$HELPERS/summary.py" "$RESULTS" "$WORK/meta.json" "${extra[@]}"
    log "deleting the working copies"
    CLEANED=1
    cleanup_work
    if [[ $FAILED == 1 ]]; then
        log "some runs FAILED (see above and $WORK/logs/)"
        exit 1
    fi
}

main
