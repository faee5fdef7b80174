#!/usr/bin/env python3
"""Summarises the measurements of scripts/bench.sh: a table and a JSON document.

    summary.py RESULTS.tsv META.json [--json-out FILE]

RESULTS.tsv has one line per measurement, `GROUP<TAB>METRIC<TAB>VARIANT<TAB>ROUND<TAB>SECONDS`,
or `GROUP<TAB>-<TAB>VARIANT<TAB>ROUND<TAB>FAIL` for a run that failed; measurements of
rounds <= 0 (warm-up rounds) are ignored, their failures are not. META.json is an
object merged into the top of the JSON summary (it must hold "rounds"). Prints the table,
then the JSON (one line) on stdout; with --json-out also writes the JSON (indented) there.
Exit status 0 (failures are reported in the JSON and the table, not by the exit status).
"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("meta")
    ap.add_argument("--json-out")
    ap.add_argument("--fuse", help="FUSE request counts: GROUP, LABEL, ROUND, OP=N,..., LOST")
    a = ap.parse_args()

    with open(a.meta) as f:
        meta = json.load(f)
    order = []  # (group, metric) in first-seen order
    values = {}  # (group, metric) -> {"bare": [...], "agx": [...]}
    failures = []
    unmounts = {}  # group -> [seconds of `agx unmount`]
    with open(a.results) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 5:
                continue
            group, metric, variant, rnd, secs = parts
            if secs == "FAIL":
                failures.append({"workload": group, "variant": variant, "round": int(rnd)})
                continue
            if int(rnd) <= 0:
                continue  # a warm-up round
            if metric == "(unmount)":
                unmounts.setdefault(group, []).append(float(secs))
                continue
            key = (group, metric)
            if key not in values:
                order.append(key)
                values[key] = {"bare": [], "agx": []}
            values[key][variant].append(float(secs))

    results = []
    for group, metric in order:
        v = values[(group, metric)]
        bare = statistics.median(v["bare"]) if v["bare"] else None
        agx = statistics.median(v["agx"]) if v["agx"] else None
        ratio = agx / bare if bare and agx is not None else None
        results.append({
            "workload": metric,
            "group": group,
            "bare_median_s": None if bare is None else round(bare, 4),
            "agx_median_s": None if agx is None else round(agx, 4),
            "ratio": None if ratio is None else round(ratio, 3),
            "bare_s": [round(x, 4) for x in v["bare"]],
            "agx_s": [round(x, 4) for x in v["agx"]],
            "agx_unmount_median_s": (round(statistics.median(unmounts[group]), 4)
                                     if unmounts.get(group) else None),
        })
    failed_groups = sorted({f["workload"] for f in failures})
    for g in failed_groups:
        if not any(r["group"] == g for r in results):
            results.append({"workload": g, "group": g, "bare_median_s": None,
                            "agx_median_s": None, "ratio": None, "bare_s": [], "agx_s": []})

    doc = dict(meta)
    doc["results"] = results
    doc["failures"] = failures
    fuse = read_fuse(a.fuse) if a.fuse else None
    if fuse is not None:
        doc["fuse_requests"] = fuse

    def fmt(x, w, p=3):
        return f"{'-':>{w}}" if x is None else f"{x:>{w}.{p}f}"

    print()
    print(f"{'workload':<24}{'bare(s)':>10}{'agx(s)':>10}{'ratio':>8}   runs(bare/agx)")
    print("-" * 68)
    for r in results:
        note = ""
        nfail = sum(1 for f in failures if f["workload"] == r["group"])
        if nfail:
            note = f"  FAILED x{nfail}"
        print(f"{r['workload']:<24}{fmt(r['bare_median_s'], 10)}{fmt(r['agx_median_s'], 10)}"
              f"{fmt(r['ratio'], 8, 2)}   {len(r['bare_s'])}/{len(r['agx_s'])}{note}")
    if unmounts:
        print("agx unmount (not timed in the ratios), median: " + ", ".join(
            f"{g} {statistics.median(v):.3f}s" for g, v in unmounts.items()))
    if fuse:
        print()
        print("FUSE requests per timed step (agx, first measured round):")
        print(f"{'step':<44}{'total':>8}   most frequent")
        for label, v in fuse.items():
            ops = sorted(v["ops"].items(), key=lambda kv: -kv[1])
            top = " ".join(f"{k}={n}" for k, n in ops[:6])
            lost = f"  (LOST {v['lost']} events)" if v["lost"] else ""
            print(f"{label:<44}{v['total']:>8}   {top}{lost}")
    print()
    line = json.dumps(doc, separators=(",", ":"))
    print(line)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


def read_fuse(path):
    """{label: {"ops": {OP: n}, "total": n, "lost": n}} of the first measured round."""
    out = {}
    try:
        f = open(path)
    except FileNotFoundError:
        return out
    rows = []
    with f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 5:
                continue
            group, label, rnd, counts, lost = parts
            rows.append((int(rnd), group, label, counts, int(lost or 0)))
    measured = [r for r in rows if r[0] > 0]
    if not measured:
        return out
    for rnd, group, label, counts, lost in measured:
        if rnd != min(r[0] for r in measured if r[1] == group):
            continue
        ops = {}
        if counts != "none":
            for kv in counts.split(","):
                k, n = kv.split("=")
                ops[k] = int(n)
        out[label] = {"ops": ops, "total": sum(ops.values()), "lost": lost}
    return out


if __name__ == "__main__":
    main()
