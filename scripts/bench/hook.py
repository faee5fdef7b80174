#!/usr/bin/env python3
"""`agx hook claude` latency, end to end: a process spawns `sh -c "agx hook claude"` (as
Claude Code does) with one hook event on stdin and waits for it, in a mounted project.
Prints the median (and p95) per event kind and over all runs, in milliseconds.

Usage: hook.py [--runs N]   (AGX_BIN: the agx binary)
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

AGX = os.path.abspath(os.environ.get("AGX_BIN", "target/release/agx"))


def event(cwd, name, **extra):
    e = {"session_id": "bench-session", "transcript_path": "/tmp/t.jsonl",
         "cwd": cwd, "hook_event_name": name}
    e.update(extra)
    return json.dumps(e).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="agx-bench-hook-") as tmp:
        proj = os.path.join(tmp, "project")
        os.mkdir(proj)
        subprocess.run([AGX, "mount", proj], check=True, capture_output=True)
        try:
            kinds = {
                "UserPromptSubmit": lambda i: event(proj, "UserPromptSubmit", prompt=f"prompt {i} " * 20),
                "PreToolUse": lambda i: event(proj, "PreToolUse", tool_name="Bash",
                                              tool_use_id=f"toolu_{i}",
                                              tool_input={"command": "ls"}),
                "PostToolUse": lambda i: event(proj, "PostToolUse", tool_name="Bash",
                                               tool_use_id=f"toolu_{i}",
                                               tool_response={"stdout": "x" * 200}),
            }
            hook = ["sh", "-c", f"'{AGX}' hook claude"]
            subprocess.run(hook, input=event(proj, "SessionStart", source="startup"),
                           check=True, cwd=proj)
            times = {k: [] for k in kinds}
            for i in range(a.runs):
                for k, make in kinds.items():
                    data = make(i)
                    t0 = time.perf_counter()
                    r = subprocess.run(hook, input=data, cwd=proj, capture_output=True)
                    dt = (time.perf_counter() - t0) * 1000
                    if r.stderr:
                        raise SystemExit(f"hook complained: {r.stderr.decode()}")
                    times[k].append(dt)
            subprocess.run(hook, input=event(proj, "SessionEnd"), check=True, cwd=proj)
            allt = [t for v in times.values() for t in v]
            for k, v in times.items():
                v.sort()
                print(f"{k:17} median {statistics.median(v):6.2f} ms   p95 {v[int(len(v) * 0.95) - 1]:6.2f} ms   ({len(v)} runs)")
            allt.sort()
            print(f"{'all events':17} median {statistics.median(allt):6.2f} ms   p95 {allt[int(len(allt) * 0.95) - 1]:6.2f} ms   ({len(allt)} runs)")
            print(f"median latency: {statistics.median(allt):.2f} ms")
        finally:
            subprocess.run([AGX, "unmount", proj], capture_output=True, cwd="/")


if __name__ == "__main__":
    main()
