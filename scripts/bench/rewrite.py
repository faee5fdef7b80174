#!/usr/bin/env python3
"""Rewrite existing source files the way editors and coding agents do (workload `rewrite`).

    rewrite.py DIR MANIFEST [--count 2000] [--seed 3]

Picks --count distinct files (deterministically) from MANIFEST (paths relative to DIR).
Each rewrite reads the file, changes one line and writes the whole new content back:
  * the first half in place: open(O_WRONLY|O_TRUNC) + write + close
    (printed as `rewrite_inplace_<N/2>`);
  * the second half atomically: write DIR/.../.NAME.agxbench.tmp (O_CREAT|O_EXCL),
    close, then rename() it over the original (printed as `rewrite_rename_<N/2>`).
No fsync (most editors and agent tools do not fsync). Every result is read back and
checked after the timed loops.
"""
import argparse
import os
import random
import time

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("manifest")
ap.add_argument("--count", type=int, default=2000)
ap.add_argument("--seed", type=int, default=3)
a = ap.parse_args()

with open(a.manifest) as f:
    files = [l.rstrip("\n") for l in f if l.strip()]
pick = random.Random(a.seed).sample(files, a.count)
half = a.count // 2
inplace, renamed = pick[:half], pick[half:]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def edit(data: bytes, i: int) -> bytes:
    nl = data.find(b"\n")
    return b"// edited by the agx benchmark, edit %d\n" % i + (data[nl + 1:] if nl >= 0 else data)


expected = {}
t0 = time.perf_counter()
for i, rel in enumerate(inplace):
    p = os.path.join(a.dir, rel)
    with open(p, "rb") as f:
        new = edit(f.read(), i)
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    write_all(fd, new)
    os.close(fd)
    expected[rel] = new
t1 = time.perf_counter()
for i, rel in enumerate(renamed, start=half):
    p = os.path.join(a.dir, rel)
    d, name = os.path.split(p)
    tmp = os.path.join(d, f".{name}.agxbench.tmp")
    with open(p, "rb") as f:
        new = edit(f.read(), i)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    write_all(fd, new)
    os.close(fd)
    os.rename(tmp, p)
    expected[rel] = new
t2 = time.perf_counter()

for rel, new in expected.items():
    with open(os.path.join(a.dir, rel), "rb") as f:
        got = f.read()
    assert got == new, f"{rel}: content mismatch after rewrite ({len(got)} vs {len(new)} bytes)"

print(f"rewrite_inplace_{half} {t1 - t0:.6f}")
print(f"rewrite_rename_{a.count - half} {t2 - t1:.6f}")
