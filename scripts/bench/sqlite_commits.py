#!/usr/bin/env python3
"""N SQLite commits in rollback-journal (DELETE) mode (workload `sqlite` of bench.sh).

    sqlite_commits.py DIR [--commits 2000]

Creates DIR/bench.db with `PRAGMA journal_mode=DELETE` (and SQLite's default
synchronous=FULL, so every commit fsyncs the journal and the database and deletes the
journal), then performs --commits transactions of one INSERT each. Prints
`sqlite_<N> SECONDS` for the commit loop (table creation excluded).
"""
import argparse
import os
import sqlite3
import time

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--commits", type=int, default=2000)
a = ap.parse_args()

db = sqlite3.connect(os.path.join(a.dir, "bench.db"), isolation_level=None)
mode = db.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
assert mode.lower() == "delete", mode
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL)")
payload = b"x" * 200
t0 = time.perf_counter()
for i in range(a.commits):
    db.execute("BEGIN")
    db.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"key-{i}", payload))
    db.execute("COMMIT")
t1 = time.perf_counter()
n = db.execute("SELECT count(*) FROM t").fetchone()[0]
assert n == a.commits, n
ok = db.execute("PRAGMA integrity_check").fetchone()[0]
assert ok == "ok", ok
db.close()
assert not os.path.exists(os.path.join(a.dir, "bench.db-journal"))
print(f"sqlite_{a.commits} {t1 - t0:.6f}")
