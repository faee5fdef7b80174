#!/usr/bin/env python3
"""Builds the git fixture for the agx benchmarks (deterministically).

    make_git_fixture.py OUT [--files 5000] [--dirs 300] [--commits 10] [--per-commit 100]

OUT becomes a git repository whose work tree has --files files in --dirs directories.
History: tag `v1` (the initial tree), then --commits commits, each modifying 90% of
--per-commit files, adding 5% and deleting 5% (disjoint sets), ending at tag `v2` on
branch `main`, which is checked out. With the defaults, v1 and v2 differ in 1,000 files
(900 modified, 50 added, 50 deleted). Objects are packed (`git gc`), `gc.auto` is 0.
"""

import argparse
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gentree import file_content, file_size, make_tree, plan_tree  # noqa: E402

DATE = 1_700_000_000


def git(repo, *args, date=None):
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.invalid",
        GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null",
    )
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{date} +0000"
    subprocess.run(["git", "-C", repo, *args], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--dirs", type=int, default=300)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--per-commit", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()

    repo = a.out
    os.makedirs(repo, exist_ok=True)
    files = make_tree(repo, a.files, a.dirs, seed=a.seed)
    dirs, _ = plan_tree(a.files, a.dirs, a.seed, 1, 20)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "gc.auto", "0")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v1: initial tree", date=DATE)
    git(repo, "tag", "v1")

    rng = random.Random(a.seed * 1000 + 1)
    pool = list(files)
    rng.shuffle(pool)
    n_mod = a.per_commit * 90 // 100
    n_add = n_del = (a.per_commit - n_mod) // 2
    changed = {"modified": 0, "added": 0, "deleted": 0}
    for c in range(1, a.commits + 1):
        for rel in [pool.pop() for _ in range(n_mod)]:
            path = os.path.join(repo, rel)
            size = os.path.getsize(path)
            with open(path, "wb") as f:
                f.write(file_content(rel, c, size + rng.randint(-200, 400)))
            changed["modified"] += 1
        for rel in [pool.pop() for _ in range(n_del)]:
            os.unlink(os.path.join(repo, rel))
            changed["deleted"] += 1
        for i in range(n_add):
            rel = os.path.join(rng.choice(dirs), f"added_c{c:02d}_{i:03d}.rs")
            with open(os.path.join(repo, rel), "wb") as f:
                f.write(file_content(rel, c, file_size(rng, 1, 20)))
            changed["added"] += 1
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"change set {c}", date=DATE + 3600 * c)
    git(repo, "tag", "v2")
    git(repo, "gc", "-q")
    print(f"git fixture: {len(files)} files at v1; v1..v2: {changed}", file=sys.stderr)


if __name__ == "__main__":
    main()
