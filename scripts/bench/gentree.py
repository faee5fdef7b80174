#!/usr/bin/env python3
"""Deterministic synthetic source tree for the agx benchmarks.

    gentree.py OUT --files N --dirs D [--seed S] [--min-kb A] [--max-kb B] [--manifest FILE]

Creates N text files spread over D directories (nested up to 5 levels) under OUT, with
sizes log-uniformly distributed between A and B KiB (default 1-20) and content that looks
like source code (so git compresses it the way it compresses real code). The same
arguments always give byte-identical files. With --manifest, the relative paths of the
files are written there, one per line, sorted.

Also importable: make_tree() and file_content() are used by make_git_fixture.py.
"""

import argparse
import math
import os
import random

EXTS = [".rs", ".c", ".h", ".py", ".js", ".ts", ".go", ".md", ".toml", ".json"]
WORDS = (
    "alpha beta gamma delta core util net io fs parse lex ast codegen ir opt driver "
    "cache store index query plan exec sched task worker pool buffer stream codec "
    "crypto hash sign verify auth token session config log trace metric event bus "
    "queue topic client server proto rpc http json yaml toml cli ui view model ctrl"
).split()
KEYWORDS = ["fn", "let", "if", "else", "for", "while", "return", "match", "struct", "impl"]


def _line_pool(seed: int, n: int = 4096):
    rng = random.Random(seed ^ 0x5EED)
    pool = []
    for _ in range(n):
        indent = " " * (4 * rng.randint(0, 3))
        kind = rng.random()
        a, b, c = rng.choice(WORDS), rng.choice(WORDS), rng.choice(WORDS)
        if kind < 0.15:
            pool.append(f"{indent}// {a} {b} {c}: {rng.choice(WORDS)} the {rng.choice(WORDS)}\n")
        elif kind < 0.35:
            pool.append(f"{indent}let {a}_{b} = {c}::{rng.choice(WORDS)}({rng.randint(0, 9999)});\n")
        elif kind < 0.5:
            pool.append(f"{indent}{rng.choice(KEYWORDS)} {a}_{b} {{\n")
        elif kind < 0.6:
            pool.append(f"{indent}}}\n")
        elif kind < 0.8:
            pool.append(f"{indent}{a}.{b}_{c}(&mut {rng.choice(WORDS)}, {rng.randint(0, 255)})?;\n")
        else:
            pool.append(f'{indent}"{a}-{b}-{c}" => {rng.randint(0, 1 << 20)},\n')
    return pool


_POOLS = {}


def file_content(rel: str, seed: int, size: int) -> bytes:
    """Deterministic content of about `size` bytes for file `rel` (version `seed`)."""
    pool = _POOLS.get(seed & 0xFF)
    if pool is None:
        pool = _POOLS[seed & 0xFF] = _line_pool(seed & 0xFF)
    rng = random.Random(f"{seed}:{rel}")
    out = [f"// {rel} (synthetic, version {seed})\n"]
    total = len(out[0])
    while total < size:
        chunk = rng.choices(pool, k=32)
        out.extend(chunk)
        total += sum(len(x) for x in chunk)
    data = "".join(out).encode()
    return data[:size] if size > 64 else data


def file_size(rng: random.Random, min_kb: float, max_kb: float) -> int:
    lo, hi = math.log(min_kb * 1024), math.log(max_kb * 1024)
    return int(math.exp(rng.uniform(lo, hi)))


def plan_tree(files: int, dirs: int, seed: int, min_kb: float, max_kb: float):
    """Returns (dirs, [(relpath, size)]) without touching the disk."""
    rng = random.Random(seed)
    dir_list = [("", 0)]  # (relpath, depth)
    for i in range(dirs):
        # Prefer shallow parents so the tree is bushy rather than a long chain.
        cands = [d for d in dir_list if d[1] < 5]
        parent, depth = rng.choice(cands)
        name = f"{rng.choice(WORDS)}_{i:03d}"
        dir_list.append((os.path.join(parent, name) if parent else name, depth + 1))
    real_dirs = [d for d, _ in dir_list[1:]]
    plan = []
    used = set()
    for i in range(files):
        d = rng.choice(real_dirs) if real_dirs else ""
        ext = rng.choice(EXTS)
        name = f"{rng.choice(WORDS)}_{i:05d}{ext}"
        rel = os.path.join(d, name) if d else name
        assert rel not in used
        used.add(rel)
        plan.append((rel, file_size(rng, min_kb, max_kb)))
    return real_dirs, plan


def make_tree(out: str, files: int, dirs: int, seed: int = 1, min_kb: float = 1,
              max_kb: float = 20, version: int = 0):
    real_dirs, plan = plan_tree(files, dirs, seed, min_kb, max_kb)
    for d in real_dirs:
        os.makedirs(os.path.join(out, d), exist_ok=True)
    for rel, size in plan:
        with open(os.path.join(out, rel), "wb") as f:
            f.write(file_content(rel, version, size))
    return [rel for rel, _ in plan]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--files", type=int, required=True)
    ap.add_argument("--dirs", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-kb", type=float, default=1)
    ap.add_argument("--max-kb", type=float, default=20)
    ap.add_argument("--manifest")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    paths = make_tree(a.out, a.files, a.dirs, a.seed, a.min_kb, a.max_kb)
    if a.manifest:
        with open(a.manifest, "w") as f:
            f.write("".join(p + "\n" for p in sorted(paths)))


if __name__ == "__main__":
    main()
