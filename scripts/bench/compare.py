#!/usr/bin/env python3
"""Merges two scripts/bench.sh JSON summaries into one table of what capture costs: one run
of bare directory vs. capture on, one of plain mount vs. capture on (`--base plain`).

    compare.py VS_BARE.json VS_PLAIN.json [--json OUT]

capture/bare and capture/plain are each the ratio of medians within their own run (the
variants alternate there); plain/bare is their quotient. The capture column is the median
of the first run.
"""
import json, sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
vs_bare, vs_plain = (json.load(open(p)) for p in args[:2])
if "plain" not in vs_plain.get("base", ""):
    sys.exit(f"compare.py: {args[1]} is not a --base plain run")
p = {r["workload"]: r for r in vs_plain["results"]}
rows = []
print(f"{'workload':<24}{'bare(s)':>9}{'plain(s)':>10}{'capture(s)':>12}"
      f"{'cap/bare':>10}{'cap/plain':>11}{'plain/bare':>12}")
for r in vs_bare["results"]:
    w = r["workload"]
    if w not in p or r["ratio"] is None or p[w]["ratio"] is None:
        continue
    row = {"workload": w, "bare_s": r["bare_median_s"], "plain_s": p[w]["bare_median_s"],
           "capture_s": r["agx_median_s"], "capture_vs_bare": round(r["ratio"], 2),
           "capture_vs_plain": round(p[w]["ratio"], 2),
           "plain_vs_bare": round(r["ratio"] / p[w]["ratio"], 2)}
    rows.append(row)
    print(f"{w:<24}{row['bare_s']:>9.3f}{row['plain_s']:>10.3f}{row['capture_s']:>12.3f}"
          f"{row['capture_vs_bare']:>10.2f}{row['capture_vs_plain']:>11.2f}{row['plain_vs_bare']:>12.2f}")
if out:
    json.dump({"rows": rows, "rounds": vs_bare.get("rounds")}, open(out, "w"), indent=1)
