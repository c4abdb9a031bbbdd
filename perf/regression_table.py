#!/usr/bin/env python3
"""regression_table.py - the tables of perf/regression.sh from its JSON files.

  regression_table.py OUT_DIR BASELINE NEW_COMMIT ROUNDS NEW_ENV LOAD

OUT_DIR holds TABLE-new-R.json and TABLE-old-R.json (weft-perf --json, one sweep per build and
round). Per table and size: the median over rounds of each build's out-of-place time, their
ratio new/old, and the lowest and highest ratio of one round's pair (how far a single sweep
pair can be off). Per table: the geometric mean over sizes of the median of the paired (same-round) ratios (the
goal: <= 1.05), of the ratios of medians, and the geometric means each single round gave. Python 3 standard library only.
"""
import glob
import json
import math
import os
import re
import statistics
import sys


def rows_by_size(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return {r["size"]: r["out_of_place"]["time_us"] for r in doc.get("rows", [])
            if r.get("out_of_place", {}).get("time_us", 0) > 0}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(out_dir, name, rounds):
    runs = {b: [rows_by_size(os.path.join(out_dir, f"{name}-{b}-{r}.json")) for r in range(1, rounds + 1)]
            for b in ("new", "old")}
    sizes = sorted(set().union(*runs["new"], *runs["old"]))
    lines, ratios = [], []
    for s in sizes:
        new = [run[s] for run in runs["new"] if s in run]
        old = [run[s] for run in runs["old"] if s in run]
        if not new or not old:
            continue
        pairs = [a[s] / b[s] for a, b in zip(runs["new"], runs["old"]) if s in a and s in b]
        ratio = statistics.median(new) / statistics.median(old)
        paired = statistics.median(pairs)
        ratios.append((ratio, paired))
        lines.append(f"| {s} | {statistics.median(new):.2f} | {statistics.median(old):.2f} | "
                     f"{ratio:.2f} | {paired:.2f} | {min(pairs):.2f}-{max(pairs):.2f} | "
                     f"{len(new)}/{len(old)} |")
    per_round = []
    for a, b in zip(runs["new"], runs["old"]):
        common = [s for s in sizes if s in a and s in b]
        if common:
            per_round.append(geomean([a[s] / b[s] for s in common]))
    return lines, ratios, per_round


def main():
    out_dir, baseline, commit, rounds, new_env, load = sys.argv[1:7]
    rounds = int(rounds)
    names = sorted({re.sub(r"-(new|old)-\d+\.json$", "", os.path.basename(p))
                    for p in glob.glob(os.path.join(out_dir, "*-new-*.json"))})
    env_txt = f" with {new_env} for {commit}" if new_env else ""
    env_opt = "".join(f" --new-env {e}" for e in new_env.split())
    print(f"# weft {commit} against {baseline}{env_txt}: {rounds} interleaved rounds per table\n")
    print(f"Command: `perf/regression.sh --baseline {baseline} --rounds {rounds}{env_opt}`; load average "
          f"at the end: {load}. Time = out-of-place time per call (us), median over the rounds; "
          "ratio = new/old (above 1: the tree is slower). The goal is decided on the median of "
          "the paired ratios: each round's new/old, whose two sweeps ran seconds apart. This VM "
          "flips between a fast and a slow state for tens of seconds at a time (L3/memory "
          "contention from outside it: a 256 KiB in-cache copy takes 5 or 13 us), which the "
          "ratio of medians mistakes for a difference whenever one build drew more slow rounds. "
          "One-round spread = lowest and highest new/old of a single round's pair.\n")
    summary = ["| table | geometric mean of the paired ratios' medians | of the medians' ratios | "
               "single rounds' geometric means | goal (paired) |",
               "|---|---|---|---|---|"]
    detail = []
    for name in names:
        lines, ratios, per_round = table(out_dir, name, rounds)
        if not ratios:
            summary.append(f"| {name} | no data | | |")
            continue
        gm_medians = geomean([r for r, _ in ratios])
        gm = geomean([p for _, p in ratios])
        rounds_txt = ", ".join(f"{g:.2f}" for g in per_round)
        summary.append(f"| {name} | {gm:.3f} over {len(ratios)} sizes | {gm_medians:.3f} | {rounds_txt} | "
                       f"{'met' if gm <= 1.05 else '**missed**'} |")
        detail += [f"\n**{name}**\n",
                   "| size (B) | new (us) | old (us) | ratio of medians | median of paired ratios | "
                   "one-round spread | rounds new/old |",
                   "|---|---|---|---|---|---|---|"] + lines
    print("\n".join(summary + detail))


if __name__ == "__main__":
    main()
