#!/usr/bin/env python3
"""perf/model/guard_summary.py OUT_DIR SETUP: the table of a selection_guard.sh run.

Per size: the algorithm(s) each build ran, its out-of-place times per round and the ratio of
the medians (new / old)."""
import glob
import json
import statistics
import sys


def main():
    out, setup = sys.argv[1], sys.argv[2]
    rows = {}
    for build in ("old", "new"):
        for path in sorted(glob.glob(f"{out}/{setup}-{build}-*.json")):
            for r in json.load(open(path))["rows"]:
                d = rows.setdefault(r["size"], {"old": [], "new": [], "algo_old": set(), "algo_new": set()})
                d[build].append(r["out_of_place"]["time_us"])
                d["algo_" + build].add(r.get("algo", ""))
    fmt = lambda v: ", ".join(f"{x:.0f}" if x >= 100 else f"{x:.1f}" for x in v)
    print("| setup | size (B) | old algorithm | new algorithm | old (us), runs | new (us), runs | new/old (medians) |")
    print("|---|---:|---|---|---|---|---:|")
    for size in sorted(rows):
        d = rows[size]
        if not d["old"] or not d["new"]:
            continue
        ratio = statistics.median(d["new"]) / statistics.median(d["old"])
        print(f"| {setup} | {size} | {'/'.join(sorted(d['algo_old']))} | {'/'.join(sorted(d['algo_new']))} | "
              f"{fmt(d['old'])} | {fmt(d['new'])} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
