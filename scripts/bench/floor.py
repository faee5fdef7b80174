#!/usr/bin/env python3
"""What any FUSE filesystem costs per edit on this machine (scripts/bench-floor.sh).

    floor.py MOUNTED BARE [--edits 500] [--rounds 3] [--json FILE]

MOUNTED is an agx mount (the plain mount, AGX_CAPTURE=0, so capture adds nothing) and
BARE a directory on the same filesystem. Measures, in one run:

  * the machine's wakeup cost: a one-byte pipe ping-pong between two processes pinned
    to the same CPU and to different CPUs (a FUSE request that the kernel hands to a
    daemon thread on another CPU pays two such wakeups);
  * a null FUSE round trip: isatty() on a file in MOUNTED, which the kernel sends to
    the daemon as FUSE_IOCTL and the daemon answers at once (the same call in BARE
    never leaves the kernel);
  * the edit loop of scripts/bench/rewrite.py (read a file, change its first line,
    write it back in place or through a temporary file renamed over it) in both
    directories, and, where tracefs allows (root), how many FUSE requests each edit
    sends that the editing process waits for;
  * the floor: a bare edit plus that many null round trips, the least a FUSE
    filesystem that did no work at all could take, as a ratio to the bare edit.

Each round measures BARE and MOUNTED one after the other, on fresh files; medians are
printed. Every number is a measurement of this run; nothing is assumed.
"""
import argparse
import json
import os
import statistics
import time

# FUSE requests the caller does not wait for: the kernel sends them in the background.
ASYNC_OPS = {"FUSE_RELEASE", "FUSE_RELEASEDIR", "FUSE_FORGET", "FUSE_BATCH_FORGET"}
TRACING = "/sys/kernel/tracing"


def ping_pong(cpu_a, cpu_b, n=20000):
    """Microseconds per one-byte round trip between two processes on the given CPUs."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.sched_setaffinity(0, {cpu_b})
            for _ in range(n):
                os.read(r1, 1)
                os.write(w2, b"x")
        finally:
            os._exit(0)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu_a})
    t = time.perf_counter()
    for _ in range(n):
        os.write(w1, b"x")
        os.read(r2, 1)
    dt = time.perf_counter() - t
    os.sched_setaffinity(0, before)
    os.waitpid(pid, 0)
    for fd in (r1, w1, r2, w2):
        os.close(fd)
    return dt / n * 1e6


def null_round_trip(path, n=20000):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        t = time.perf_counter()
        for _ in range(n):
            os.isatty(fd)
        return (time.perf_counter() - t) / n * 1e6
    finally:
        os.close(fd)


def make_files(base, n, tag):
    d = os.path.join(base, f"agx-floor-{tag}")
    os.makedirs(d, exist_ok=True)
    body = b"".join(b"line %d of a small source file\n" % i for i in range(40))
    paths = []
    for i in range(n):
        p = os.path.join(d, f"f{i:05d}.txt")
        with open(p, "wb") as f:
            f.write(body)
        paths.append(p)
    return d, paths


def edit(data, i):
    nl = data.find(b"\n")
    return b"// edit %d\n" % i + (data[nl + 1:] if nl >= 0 else data)


def edit_loop(paths, rename):
    """Seconds per edit, the way scripts/bench/rewrite.py edits."""
    t = time.perf_counter()
    for i, p in enumerate(paths):
        with open(p, "rb") as f:
            new = edit(f.read(), i)
        if rename:
            d, name = os.path.split(p)
            tmp = os.path.join(d, f".{name}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.write(fd, new)
            os.close(fd)
            os.rename(tmp, p)
        else:
            fd = os.open(p, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
            os.write(fd, new)
            os.close(fd)
    return (time.perf_counter() - t) / len(paths)


class Trace:
    """Counts FUSE requests by opcode in a private tracefs instance (root only)."""

    def __init__(self):
        self.dir = os.path.join(TRACING, "instances", f"agx-floor-{os.getpid()}")
        os.mkdir(self.dir)
        self._w("events/fuse/fuse_request_send/enable", "1")

    def _w(self, rel, val):
        with open(os.path.join(self.dir, rel), "w") as f:
            f.write(val)

    def count(self, fn):
        self._w("trace", "")
        self._w("tracing_on", "1")
        try:
            fn()
        finally:
            self._w("tracing_on", "0")
        ops = {}
        with open(os.path.join(self.dir, "trace")) as f:
            for line in f:
                if "fuse_request_send" not in line or "(" not in line:
                    continue
                op = line.rsplit("(", 1)[1].split(")", 1)[0]
                ops[op] = ops.get(op, 0) + 1
        return ops

    def close(self):
        try:
            self._w("events/fuse/fuse_request_send/enable", "0")
        finally:
            os.rmdir(self.dir)


def trace_or_none():
    try:
        return Trace()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mounted")
    ap.add_argument("bare")
    ap.add_argument("--edits", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()

    cpus = sorted(os.sched_getaffinity(0))
    wake = {"same_cpu_us": statistics.median(ping_pong(cpus[0], cpus[0]) for _ in range(3))}
    if len(cpus) > 1:
        wake["cross_cpu_us"] = statistics.median(
            ping_pong(cpus[0], cpus[1]) for _ in range(3)
        )

    results = {"inplace": {"bare": [], "mounted": []}, "rename": {"bare": [], "mounted": []}}
    null_rt, bare_rt = [], []
    for r in range(a.rounds):
        for label, base in (("bare", a.bare), ("mounted", a.mounted)):
            d, paths = make_files(base, a.edits, f"{label}{r}")
            if label == "mounted":
                null_rt.append(null_round_trip(paths[0]))
            else:
                bare_rt.append(null_round_trip(paths[0]))
            half = len(paths) // 2
            results["inplace"][label].append(edit_loop(paths[:half], rename=False))
            results["rename"][label].append(edit_loop(paths[half:], rename=True))

    sync_per_edit = {}
    tr = trace_or_none()
    if tr is not None:
        try:
            _, paths = make_files(a.mounted, 200, "trace")
            for kind, rename in (("inplace", False), ("rename", True)):
                sel = paths[:100] if not rename else paths[100:]
                ops = tr.count(lambda: edit_loop(sel, rename))
                sync = sum(n for op, n in ops.items() if op not in ASYNC_OPS)
                sync_per_edit[kind] = {
                    "sync_requests": sync / len(sel),
                    "by_op": {op: n / len(sel) for op, n in sorted(ops.items())},
                }
        finally:
            tr.close()

    null_us = statistics.median(null_rt)
    out = {
        "wakeup_round_trip": wake,
        "null_fuse_round_trip_us": null_us,
        "same_call_on_bare_us": statistics.median(bare_rt),
        "edits": {},
    }
    print("machine: pipe round trip between two processes, same CPU %.1f us%s" % (
        wake["same_cpu_us"],
        ", different CPUs %.1f us" % wake["cross_cpu_us"] if "cross_cpu_us" in wake else "",
    ))
    print("null FUSE round trip (isatty -> FUSE_IOCTL, answered at once): %.1f us "
          "(bare: %.2f us)" % (null_us, out["same_call_on_bare_us"]))
    print()
    print(f"{'edit':10} {'bare us':>9} {'mount us':>9} {'ratio':>6} {'sync req':>9} "
          f"{'floor us':>9} {'floor ratio':>11}")
    for kind in ("inplace", "rename"):
        b = statistics.median(results[kind]["bare"]) * 1e6
        m = statistics.median(results[kind]["mounted"]) * 1e6
        row = {"bare_us": b, "mounted_us": m, "ratio": m / b}
        s = sync_per_edit.get(kind)
        if s:
            floor = b + s["sync_requests"] * null_us
            row.update(sync_per_edit=s, floor_us=floor, floor_ratio=floor / b)
            print(f"{kind:10} {b:9.1f} {m:9.1f} {m / b:6.2f} {s['sync_requests']:9.1f} "
                  f"{floor:9.1f} {floor / b:11.2f}")
            print(f"{'':10} requests per edit: " + ", ".join(
                f"{op.removeprefix('FUSE_')} {n:g}" for op, n in s["by_op"].items()))
        else:
            print(f"{kind:10} {b:9.1f} {m:9.1f} {m / b:6.2f} {'-':>9} (no tracefs: run as root)")
        out["edits"][kind] = row
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
