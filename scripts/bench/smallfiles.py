#!/usr/bin/env python3
"""Create, then stat, N small files (workload `smallfiles` of scripts/bench.sh).

    smallfiles.py DIR [--files 10000] [--per-dir 100] [--size 256]

Phase 1 (printed as `create_10k`): makes DIR/sf/dNNN/ directories (100 files each) and
creates every file with open(O_CREAT|O_EXCL|O_WRONLY) + one write of --size bytes + close.
Phase 2 (printed as `stat_10k`): os.stat() of every file, in a different order (sorted by
name within a reversed directory order), right after phase 1 in the same process, so
attribute caches are as warm as the filesystem keeps them.
Prints one `METRIC SECONDS` line per phase on stdout.
"""
import argparse
import os
import time

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--files", type=int, default=10000)
ap.add_argument("--per-dir", type=int, default=100)
ap.add_argument("--size", type=int, default=256)
a = ap.parse_args()

base = os.path.join(a.dir, "sf")
ndirs = (a.files + a.per_dir - 1) // a.per_dir
paths = [os.path.join(base, f"d{i // a.per_dir:03d}", f"f{i:05d}.txt") for i in range(a.files)]
data = (b"small file payload 0123456789abcdef\n" * (a.size // 36 + 1))[: a.size]
flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
label = f"{a.files // 1000}k" if a.files % 1000 == 0 else str(a.files)

t0 = time.perf_counter()
os.mkdir(base)
for d in range(ndirs):
    os.mkdir(os.path.join(base, f"d{d:03d}"))
for p in paths:
    fd = os.open(p, flags, 0o644)
    os.write(fd, data)
    os.close(fd)
t1 = time.perf_counter()

order = sorted(paths, key=lambda p: (-int(os.path.basename(os.path.dirname(p))[1:]), p))
total = 0
for p in order:
    total += os.stat(p).st_size
t2 = time.perf_counter()
assert total == a.files * a.size, (total, a.files * a.size)

print(f"create_{label} {t1 - t0:.6f}")
print(f"stat_{label} {t2 - t1:.6f}")
