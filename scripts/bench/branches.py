#!/usr/bin/env python3
"""Measures branches (driver of scripts/bench-branches.sh).

    branches.py AGX WORK [--rounds 5] [--files 5000] [--big-files 100000] [--changed 1000]
                [--json-out FILE]

1. `agx branch create` on a project of 100 files and one of --big-files files: the CLI's
   wall time and the engine's own time (`took_us` of `branch create --json`), medians.
2. The same work in the main mount and in a branch (`.agx/branches/NAME/`), capture on in
   both, alternating main/branch each round, a fresh branch per round:
     read_unchanged  read every file of the project (content the branch takes from its
                     base)
     untar_5k        extract a tar of the project's first 5,000 files into a new dir
     create_10k      smallfiles.py: create 10,000 files of 256 B
     stat_10k        then stat them
     git_status      `git status` twice in a row, the second timed (warm)
     edit_loop       rewrite.py: --changed rewrites of existing files (half in place,
                     half by rename)
   and prints the median of each and the ratio branch/main.
3. `agx merge` and `agx switch` of a branch where --changed files were rewritten.
4. What the branch's layer costs on disk per byte the branch changed.

Prints a table, then one JSON line (also written to --json-out).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, cwd=None, check=True, capture=True):
    r = subprocess.run(cmd, cwd=cwd, capture_output=capture, text=True)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed: {r.stdout}{r.stderr}")
    return r


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Project:
    """A project directory with agx mounted over it in place."""

    def __init__(self, agx, path):
        self.agx, self.path = agx, path

    def mount(self):
        run([self.agx, "mount", self.path])

    def unmount(self):
        run([self.agx, "unmount", self.path], cwd="/", check=False)

    def cmd(self, *args, check=True):
        return run([self.agx, "-C", self.path, *args], cwd="/", check=check)


def gentree(out, files, dirs, min_kb=1, max_kb=20):
    manifest = out + ".manifest"
    run([sys.executable, os.path.join(HERE, "gentree.py"), out, "--files", str(files),
         "--dirs", str(dirs), "--min-kb", str(min_kb), "--max-kb", str(max_kb),
         "--manifest", manifest])
    return manifest


def timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def bench_create(agx, work, big_files, rounds):
    out = {}
    for label, n in (("100", 100), (str(big_files), big_files)):
        path = os.path.join(work, f"create-{n}")
        if not os.path.isdir(path):
            log(f"making a project of {n} files")
            gentree(path, n, max(1, n // 50), 1, 2)
            run(["git", "init", "-q", path])
        p = Project(agx, path)
        p.mount()
        try:
            wall, engine = [], []
            for r in range(rounds + 1):
                t0 = time.perf_counter()
                v = json.loads(p.cmd("--json", "branch", "create", f"b{os.getpid()}-{r}").stdout)
                dt = time.perf_counter() - t0
                if r > 0:  # the first one also checks the history the mount did not see
                    wall.append(dt)
                    engine.append(v["took_us"] / 1e6)
            out[f"branch_create_{label}_cli"] = median(wall)
            out[f"branch_create_{label}_engine"] = median(engine)
        finally:
            p.unmount()
    return out


def read_all(root, manifest):
    n = 0
    with open(manifest) as f:
        for rel in f:
            with open(os.path.join(root, rel.strip()), "rb") as g:
                n += len(g.read())
    return n


def workloads(agx, work, files, changed, rounds):
    path = os.path.join(work, "project")
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    manifest = gentree(path, files, max(1, files // 40))
    tarball = os.path.join(work, "untar.tar")
    with open(manifest) as f:
        first = [l.strip() for l in f][:5000]
    with tarfile.open(tarball, "w") as t:
        for rel in first:
            t.add(os.path.join(path, rel), arcname=rel)
    run(["git", "init", "-q", "-b", "main"], cwd=path)
    run(["git", "add", "."], cwd=path)
    run(["git", "-c", "user.email=b@x", "-c", "user.name=b", "commit", "-q", "-m", "x"], cwd=path)
    p = Project(agx, path)
    p.mount()
    times = {}  # metric -> {"main": [...], "branch": [...]}

    def note(metric, variant, secs):
        times.setdefault(metric, {"main": [], "branch": []})[variant].append(secs)

    try:
        for r in range(rounds):
            b = f"w{r}"
            p.cmd("branch", "create", b)
            roots = {"main": path, "branch": os.path.join(path, ".agx", "branches", b)}
            order = ["main", "branch"] if r % 2 == 0 else ["branch", "main"]
            for v in order:
                root = roots[v]
                note("read_unchanged", v, timed(lambda: read_all(root, manifest)))
            for v in order:
                dst = os.path.join(roots[v], f"untar{r}")
                os.makedirs(dst)
                note("untar_5k", v, timed(lambda: tarfile.open(tarball).extractall(dst)))
            for v in order:
                sf = os.path.join(roots[v], f"sf{r}")
                os.makedirs(sf)
                out = run([sys.executable, os.path.join(HERE, "smallfiles.py"), sf]).stdout
                for line in out.splitlines():
                    k, secs = line.split()
                    note(k, v, float(secs))
            for v in order:
                run(["git", "status", "--porcelain"], cwd=roots[v])
                note("git_status", v, timed(lambda: run(["git", "status", "--porcelain"], cwd=roots[v])))
            for v in order:
                out = run([sys.executable, os.path.join(HERE, "rewrite.py"), roots[v], manifest,
                           "--count", str(changed), "--seed", str(r + 1)]).stdout
                total = sum(float(l.split()[1]) for l in out.splitlines() if l.startswith("rewrite_"))
                note("edit_loop", v, total)
            # The main tree as it was, for the next round (the branch is made from it).
            run(["git", "checkout", "-q", "--", "."], cwd=path)
            for d in (f"untar{r}", f"sf{r}"):
                shutil.rmtree(os.path.join(path, d))
    finally:
        p.unmount()
    return {m: {"main": median(v["main"]), "branch": median(v["branch"]),
                "ratio": median(v["branch"]) / median(v["main"])} for m, v in times.items()}


def own_bytes(tree):
    """Bytes of the regular files of a layer's tree that are the branch's own (copied up
    or made there: no `user.agx.lower` marker)."""
    n = 0
    for dirpath, _, names in os.walk(tree):
        for name in names:
            fp = os.path.join(dirpath, name)
            if not os.path.isfile(fp) or os.path.islink(fp):
                continue
            try:
                os.getxattr(fp, "user.agx.lower", follow_symlinks=False)
            except OSError:
                n += os.path.getsize(fp)
    return n


def switch_merge(agx, work, files, changed):
    path = os.path.join(work, "sm")
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    manifest = gentree(path, files, max(1, files // 40))
    p = Project(agx, path)
    p.mount()
    out = {}
    try:
        for op, b, seed in (("merge", "m", "11"), ("switch", "s", "12")):
            p.cmd("branch", "create", b)
            view = os.path.join(path, ".agx", "branches", b)
            run([sys.executable, os.path.join(HERE, "rewrite.py"), view, manifest,
                 "--count", str(changed), "--seed", seed])
            t0 = time.perf_counter()
            p.cmd(op, b)
            out[f"{op}_{changed}_s"] = time.perf_counter() - t0
        info = json.loads(p.cmd("--json", "branch", "show", "m").stdout)
    finally:
        p.unmount()
    # The merged branch's layer, read unmounted: bytes on disk per byte it changed.
    layer = os.path.join(path, ".agx", "layers", str(info["id"]))
    # Blocks allocated (a file not copied up yet is a hole of its length: no blocks).
    disk = int(run(["du", "-s", "-B1", layer]).stdout.split()[0])
    own = own_bytes(os.path.join(layer, "tree"))
    out["layer_bytes"] = disk
    out["layer_own_bytes"] = own
    out["layer_bytes_per_changed_byte"] = disk / max(1, own)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("agx")
    ap.add_argument("work")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--big-files", type=int, default=100000)
    ap.add_argument("--changed", type=int, default=1000)
    ap.add_argument("--only", default="create,work,switch")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    only = set(a.only.split(","))
    result = {"rounds": a.rounds, "files": a.files}
    if "create" in only:
        log("branch create")
        result["create"] = bench_create(a.agx, a.work, a.big_files, a.rounds)
    if "work" in only:
        log("main vs branch")
        result["work"] = workloads(a.agx, a.work, a.files, a.changed, a.rounds)
    if "switch" in only:
        log("merge and switch")
        result["switch"] = switch_merge(a.agx, a.work, a.files, a.changed)
    if "create" in result:
        print("branch create (median)")
        for k, v in result["create"].items():
            print(f"  {k:<34} {v * 1e3:9.3f} ms")
    if "work" in result:
        print(f"{'workload':<16} {'main s':>9} {'branch s':>9} {'branch/main':>12}")
        for k, v in result["work"].items():
            print(f"{k:<16} {v['main']:9.3f} {v['branch']:9.3f} {v['ratio']:12.2f}")
    if "switch" in result:
        for k, v in result["switch"].items():
            print(f"{k:<34} {v:.3f}")
    line = json.dumps(result)
    print(line)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
