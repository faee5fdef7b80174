#!/usr/bin/env python3
"""History benchmarks for agx (run by scripts/bench-history.sh).

1. restore: 1,000 files changed through the mount, then `agx restore event:1 --yes`
   (timed, mounted) and verified against the original tree.
2. store size: ROUNDS rounds of small edits (one line changed in each of FILES files per
   round) through the mount; the size of .agx/objects is compared with the bytes the edits
   changed and with `git gc`'s pack of the same history (one commit per round).

Prints a table and a JSON summary.
"""
import argparse, hashlib, json, os, random, shutil, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--agx", default=os.environ.get("AGX_BIN", "target/release/agx"))
ap.add_argument("--work", default=os.environ.get("AGX_BENCH_WORK", "/var/tmp/agx-bench-work"))
ap.add_argument("--files", type=int, default=1000)
ap.add_argument("--rounds", type=int, default=20)
ap.add_argument("--edit-files", type=int, default=200)
a = ap.parse_args()
agx = os.path.abspath(a.agx)
rng = random.Random(42)

def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)

def make_tree(root, n):
    for i in range(n):
        d = os.path.join(root, "src", f"m{i // 50:03d}")
        os.makedirs(d, exist_ok=True)
        lines = [f"fn f_{i}_{j}(x: u64) -> u64 {{ x * {rng.randint(1, 10**6)} + {j} }}\n" for j in range(60)]
        with open(os.path.join(d, f"f{i:04d}.rs"), "w") as f:
            f.writelines(lines)

def snapshot(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        dns[:] = [x for x in dns if x not in (".agx", ".git")]
        for fn in fns:
            p = os.path.join(dp, fn)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.blake2b(f.read()).hexdigest()
    return out

def files(root):
    return sorted(os.path.join(dp, fn) for dp, _, fns in os.walk(os.path.join(root, "src")) for fn in fns)

os.makedirs(a.work, exist_ok=True)
base = tempfile.mkdtemp(prefix="agx-hist-", dir=a.work)
proj = os.path.join(base, "proj")
result = {}
try:
    # 1. restore of 1,000 changed files
    make_tree(proj, a.files)
    before = snapshot(proj)
    run(agx, "mount", proj)
    try:
        for p in files(proj):
            with open(p, "a") as f:
                f.write("// changed by the agent\n")
        t0 = time.perf_counter()
        out = run(agx, "-C", proj, "restore", "event:1", "--yes")
        t_restore = time.perf_counter() - t0
        assert snapshot(proj) == before, "restore did not bring the tree back"
    finally:
        run(agx, "unmount", proj)
    result["restore_1000_s"] = round(t_restore, 3)

    # 2. store size against changed bytes and a git pack
    shutil.rmtree(proj)
    make_tree(proj, a.files)
    gitdir = os.path.join(base, "git")
    shutil.copytree(proj, gitdir)
    run("git", "init", "-q", gitdir)
    g = lambda *c: run("git", "-C", gitdir, "-c", "user.name=b", "-c", "user.email=b@x", *c)
    g("add", "-A"); g("commit", "-qm", "base")
    run(agx, "mount", proj)
    changed = 0
    try:
        paths = [os.path.relpath(p, proj) for p in files(proj)]
        for r in range(a.rounds):
            for rel in rng.sample(paths, a.edit_files):
                for root in (proj, gitdir):
                    p = os.path.join(root, rel)
                    with open(p) as f:
                        lines = f.readlines()
                    k = (r * 7 + len(rel)) % len(lines)
                    new = f"fn edited_{r}_{k}(x: u64) -> u64 {{ x + {r} }}\n"
                    if root == proj:
                        changed += len(lines[k]) + len(new)
                    lines[k] = new
                    tmp = p + ".tmp"
                    with open(tmp, "w") as f:
                        f.writelines(lines)
                    os.replace(tmp, p)
            g("add", "-A"); g("commit", "-qm", f"round {r}")
    finally:
        run(agx, "unmount", proj)
    def du(p):
        return sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(p) for fn in fns)
    store = du(os.path.join(proj, ".agx", "objects"))
    db = os.path.getsize(os.path.join(proj, ".agx", "timeline.db"))
    wal_path = os.path.join(proj, ".agx", "timeline.db-wal")
    wal = os.path.getsize(wal_path) if os.path.exists(wal_path) else 0
    g("gc", "-q", "--aggressive", "--prune=now")
    pack = du(os.path.join(gitdir, ".git", "objects"))
    result.update({
        "edits": a.rounds * a.edit_files,
        "bytes_changed": changed,
        "store_bytes": store,
        "timeline_db_bytes": db,
        "timeline_wal_bytes": wal,
        "git_pack_bytes": pack,
        "store_per_changed_byte": round(store / changed, 2),
        "store_vs_git_pack": round(store / pack, 2),
    })
finally:
    shutil.rmtree(base, ignore_errors=True)

print(f"restore of {a.files} changed files (mounted): {result['restore_1000_s']:.3f} s")
print(f"{result['edits']} edits, {result['bytes_changed']} bytes changed: store {result['store_bytes']} B "
      f"({result['store_per_changed_byte']} per changed byte), timeline.db {result['timeline_db_bytes']} B (+ WAL {result['timeline_wal_bytes']} B), "
      f"git gc pack of the same history {result['git_pack_bytes']} B (store/pack {result['store_vs_git_pack']})")
print(json.dumps(result))
