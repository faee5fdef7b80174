#!/usr/bin/env python3
"""Session benchmarks for agx (run by scripts/bench-sessions.sh).

1. oops: a session (`agx run`) changes N files (N = 5, 100, 1000), then `agx oops --yes`
   undoes it (timed, mounted, verified against the tree before), then `agx oops --yes`
   redoes it (timed). Medians over ROUNDS.
2. attribution: 10,000 small files created through the mount outside any session and
   inside `agx run` (alternating rounds, same work), median times and their ratio.

Prints a table and a JSON summary.
"""
import argparse, hashlib, json, os, shutil, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--agx", default=os.environ.get("AGX_BIN", "target/release/agx"))
ap.add_argument("--work", default=os.environ.get("AGX_BENCH_WORK", "/var/tmp/agx-bench-work"))
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--sizes", default="5,100,1000")
ap.add_argument("--creates", type=int, default=10000)
a = ap.parse_args()
agx = os.path.abspath(a.agx)

def run(*cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd[:6])}...\n{r.stderr.decode(errors='replace')}")
    return r

def snapshot(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        dns[:] = [x for x in dns if x != ".agx"]
        for fn in fns:
            p = os.path.join(dp, fn)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.blake2b(f.read()).hexdigest()
    return out

CHANGE = """
import os, sys
n = int(sys.argv[1])
for i in range(n):
    with open(f"src/f{i:04d}.txt", "a") as f:
        f.write("changed by the agent\\n")
"""

CREATE = """
import os, sys
d = sys.argv[1]
os.mkdir(d)
for i in range(int(sys.argv[2])):
    with open(f"{d}/c{i:05d}", "w") as f:
        f.write("x" * 100)
"""

os.makedirs(a.work, exist_ok=True)
base = tempfile.mkdtemp(prefix="agx-sess-", dir=a.work)
result = {"oops_ms": {}, "redo_ms": {}}
try:
    for n in [int(x) for x in a.sizes.split(",")]:
        proj = os.path.join(base, f"p{n}")
        os.makedirs(os.path.join(proj, "src"))
        for i in range(n):
            with open(os.path.join(proj, "src", f"f{i:04d}.txt"), "w") as f:
                f.write(f"file {i}\n" * 20)
        before = snapshot(proj)
        run(agx, "mount", proj)
        undo, redo = [], []
        try:
            for r in range(a.rounds):
                run(agx, "-C", proj, "run", "--agent", "bench", "--", sys.executable, "-c", CHANGE, str(n), cwd=proj)
                t0 = time.perf_counter()
                run(agx, "-C", proj, "oops", "--yes", cwd=proj)
                undo.append(time.perf_counter() - t0)
                assert snapshot(proj) == before, "oops did not bring the tree back"
                t0 = time.perf_counter()
                run(agx, "-C", proj, "oops", "--yes", cwd=proj)
                redo.append(time.perf_counter() - t0)
                run(agx, "-C", proj, "oops", "--yes", cwd=proj)  # back to `before` for the next round
        finally:
            run(agx, "unmount", proj)
        result["oops_ms"][n] = round(statistics.median(undo) * 1000, 1)
        result["redo_ms"][n] = round(statistics.median(redo) * 1000, 1)
        print(f"oops of a {n}-file session: {result['oops_ms'][n]} ms (redo {result['redo_ms'][n]} ms), median of {a.rounds}")

    # A fresh mount for each run: the daemon holds a descriptor per inode the kernel
    # caches, and these machines cap descriptors at 20,000.
    plain, sess = [], []
    for r in range(a.rounds):
        for inside in (False, True):
            proj = os.path.join(base, f"create{r}{'s' if inside else 'n'}")
            os.makedirs(proj)
            run(agx, "mount", proj)
            try:
                cmd = [sys.executable, "-c", CREATE, "d", str(a.creates)]
                if inside:
                    cmd = [agx, "-C", proj, "run", "--agent", "bench", "--"] + cmd
                t0 = time.perf_counter()
                run(*cmd, cwd=proj)
                (sess if inside else plain).append(time.perf_counter() - t0)
            finally:
                run(agx, "unmount", proj)
    p, s = statistics.median(plain), statistics.median(sess)
    result["creates"] = a.creates
    result["create_no_session_s"] = round(p, 3)
    result["create_in_session_s"] = round(s, 3)
    result["session_over_none"] = round(s / p, 3)
    print(f"{a.creates} creates: no session {p:.3f} s, in a session {s:.3f} s, ratio {s / p:.3f}")
finally:
    subprocess.run(["rm", "-rf", base])
print(json.dumps(result))
