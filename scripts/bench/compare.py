#!/usr/bin/env python3
"""Merges two scripts/bench.sh JSON summaries, one of a plain mount (AGX_CAPTURE=0) and
one with capture on, into one table: bare, plain, capture, capture/bare, capture/plain.

    compare.py PLAIN.json CAPTURE.json [--json OUT]
"""
import json, sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
plain, cap = (json.load(open(p)) for p in args[:2])
p = {r["workload"]: r for r in plain["results"]}
rows = []
print(f"{'workload':<24}{'bare(s)':>9}{'plain(s)':>10}{'capture(s)':>12}{'cap/bare':>10}{'cap/plain':>11}{'plain/bare':>12}")
for r in cap["results"]:
    w = r["workload"]
    if w not in p:
        continue
    bare = (r["bare_median_s"] + p[w]["bare_median_s"]) / 2
    pl, c = p[w]["agx_median_s"], r["agx_median_s"]
    row = {"workload": w, "bare_s": round(bare, 4), "plain_s": pl, "capture_s": c,
           "capture_vs_bare": round(c / bare, 2), "capture_vs_plain": round(c / pl, 2),
           "plain_vs_bare": round(pl / bare, 2)}
    rows.append(row)
    print(f"{w:<24}{bare:>9.3f}{pl:>10.3f}{c:>12.3f}{row['capture_vs_bare']:>10.2f}{row['capture_vs_plain']:>11.2f}{row['plain_vs_bare']:>12.2f}")
if out:
    json.dump({"rows": rows, "rounds": cap.get("rounds")}, open(out, "w"), indent=1)
