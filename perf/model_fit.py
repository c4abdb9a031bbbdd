#!/usr/bin/env python3
"""How weft's cost-model constants for CPU hosts were fitted, and how to check them again.

The selector decides with a discrete-event model (src/sim/engine.h) fed by link and compute
constants (src/topo/link_table.cc). This tool holds the measurements those constants were
fitted to and the two numbers that judge a set of constants:

  - ranking: over pairs of configurations (algorithm, chunk, channels) measured on the same
    call whose times differ by more than 10%, how often the model orders them the same way
    (what the selector needs);
  - error: predicted vs measured time per configuration (what perf/RESULTS.md reports).

Subcommands:
  measure OUT.json  [--rounds R]     time every configuration of perf/model_fit_configs.json
                                     (or --configs FILE): median of R interleaved runs each
  evaluate DATA.json [RECORD...]     ranking and error of the model, optionally with records
                                     overriding the discovered fabric ('link type=same_numa
                                     flow_gbps=13', 'compute kind=cpu copy_gbps=40',
                                     'host host=0 cache_bytes=16777216')
  search DATA.json                   coordinate descent over the same_numa / cpu / cache
                                     constants, from the current defaults
  table WORK OUT.json [--rounds R]   perf/results.sh's "predicted vs measured" rows: every
                                     same-host sweep row >= 1 MiB re-measured (median of R)
                                     and predicted on the discovered and calibrated fabrics

Measurements are this machine's: a configuration is run with WEFT_TUNING_FILE forcing it
(weft-perf, 5 warm-up calls, 20-200 timed ones), rounds interleaved so that a noisy minute
lands on every configuration alike.
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bin_dir(args):
    return args.bin or os.path.join(REPO, "build", "bin")


def key(c):
    return (c["coll"], c["nranks"], c["bytes"], c["algo"], c["chunk"], c["channels"], c.get("shm", True))


def perf_time(b, coll, nranks, size, env):
    """One weft-perf run of one size: its out-of-place time in us (nan on failure)."""
    iters = 20 if size >= (16 << 20) else (50 if size >= (1 << 20) else 200)
    cmd = [f"{b}/weftrun", "-n", str(nranks), "--no-prefix", f"{b}/weft-perf", "-C", coll,
           "-b", str(size), "-e", str(size), "-n", str(iters), "-w", "5"]
    out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True, timeout=300).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) > 10 and f[0] == str(size):
            return float(f[5])
    return float("nan")


def run_config(b, c, tune_path):
    """One run of configuration `c` (algorithm, chunk and channels forced by a tuning file)."""
    with open(tune_path, "w") as f:
        chunk = 0 if c["chunk"] in ("none", "0") else c["chunk"]
        f.write(f"{c['coll']} 0-inf {c['algo']} {chunk} {c['channels']}\n")
    env = {"WEFT_TUNING_FILE": tune_path}
    if not c.get("shm", True):
        env["WEFT_SHM_DISABLE"] = "1"
    return perf_time(b, c["coll"], c["nranks"], c["bytes"], env)


def measure(args):
    configs = json.load(open(args.configs))
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for c in configs:
                times.setdefault(key(c), []).append(run_config(bin_dir(args), c, os.path.join(tmp, "tune.txt")))
            print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    data = []
    for c in configs:
        t = [x for x in times[key(c)] if not math.isnan(x)]
        if t:
            data.append(dict(c, us=statistics.median(t), runs=t))
    json.dump(data, open(args.out, "w"), indent=0)
    print(f"{len(data)} configurations -> {args.out}")


def fabric_files(b, overrides, tmp):
    """This machine's discovered fabric for 2 and 4 ranks, with `overrides` applied."""
    paths = {}
    for n in (2, 4):
        p = os.path.join(tmp, f"fabric{n}.topo")
        subprocess.run([f"{b}/weft-topo", "-n", str(n), "--save", p], capture_output=True, check=True)
        lines = open(p).read().splitlines()
        for o in overrides:
            kind, sel = o.split()[0], o.split()[1]
            kv = dict(x.split("=", 1) for x in o.split()[2:])
            for i, line in enumerate(lines):
                f = line.split()
                if not f or f[0] != kind or sel not in f:
                    continue
                f = [x.split("=")[0] + "=" + kv[x.split("=")[0]] if "=" in x and x.split("=")[0] in kv else x
                     for x in f]
                f += [f"{k}={v}" for k, v in kv.items() if not any(x.startswith(k + "=") for x in f)]
                lines[i] = " ".join(f)
        open(p, "w").write("\n".join(lines) + "\n")
        paths[n] = p
    return paths


def sim_row(text):
    """(algorithm, time in us) of the first row weft-sim printed in `text`; (None, None) if none."""
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].isdigit():
            return f[3], float(f[6])
    return None, None


def predict(b, paths, c):
    """weft-sim's time for configuration `c` on the fabric file for its rank count; without a
    "chunk" key the selector picks chunk and channels as the library does under WEFT_ALGO."""
    cmd = [f"{b}/weft-sim", "--topo-file", paths[c["nranks"]], "-C", c["coll"], "-b", str(c["bytes"]),
           "-e", str(c["bytes"]), "-a", c["algo"]]
    if "chunk" in c:
        cmd += ["--chunk", "0" if c["chunk"] == "none" else c["chunk"], "--channels", str(c["channels"])]
    if not c.get("shm", True):
        cmd.append("--no-shm")
    return sim_row(subprocess.run(cmd, capture_output=True, text=True).stdout)[1]


def score(b, data, overrides):
    """(ranking right, wrong, rows within 15%, rows, mean |error| %) of the model on `data`."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = fabric_files(b, overrides, tmp)
        pred = {key(c): predict(b, paths, c) for c in data}
    errs = [abs(pred[key(c)] - c["us"]) / c["us"] for c in data if pred[key(c)]]
    calls = {}
    for c in data:
        if pred[key(c)]:
            calls.setdefault(key(c)[:3] + key(c)[6:], []).append((c["us"], pred[key(c)]))
    right = wrong = 0
    for runs in calls.values():
        for i in range(len(runs)):
            for j in range(i + 1, len(runs)):
                (ma, pa), (mb, pb) = runs[i], runs[j]
                if max(ma, mb) / min(ma, mb) < 1.1:
                    continue
                if (ma < mb) == (pa < pb):
                    right += 1
                else:
                    wrong += 1
    within = sum(e <= 0.15 for e in errs)
    return right, wrong, within, len(errs), 100 * sum(errs) / max(1, len(errs))


def fmt(s):
    return f"ranking {s[0]} right, {s[1]} wrong; within 15%: {s[2]}/{s[3]}; mean |error| {s[4]:.0f}%"


def evaluate(args):
    data = json.load(open(args.data))
    print(fmt(score(bin_dir(args), data, args.records)))


# The constants the search moves: record template, start (the defaults), lower and upper bound.
SEARCH = {
    "bus": ("link type=same_numa bw_gbps={}", 32, 12, 64),
    "flow": ("link type=same_numa flow_gbps={}", 10.5, 6, 32),
    "dram_flow": ("link type=same_numa dram_flow_gbps={}", 5.6, 3, 16),
    "dram_bus": ("link type=same_numa dram_bw_gbps={}", 10.4, 6, 40),
    "overhead": ("link type=same_numa overhead_us={}", 1.2, 0.3, 4),
    "copy": ("compute kind=cpu copy_gbps={}", 48, 20, 64),
    "reduce": ("compute kind=cpu reduce_gbps={}", 32, 10, 60),
    "dram_copy": ("compute kind=cpu dram_copy_gbps={}", 20, 8, 30),
    "dram_reduce": ("compute kind=cpu dram_reduce_gbps={}", 14, 6, 24),
    "cache": ("host host=0 cache_bytes={}", 12 << 20, 4 << 20, 32 << 20),
}


def search(args):
    data = json.load(open(args.data))
    b = bin_dir(args)

    def records(vals):
        return [SEARCH[k][0].format(int(v) if k == "cache" else round(v, 3)) for k, v in vals.items()]

    def objective(s):  # orderings first, then accuracy
        return (s[0] - s[1]) + 0.2 * s[2] - s[4]

    vals = {k: v[1] for k, v in SEARCH.items()}
    best = score(b, data, records(vals))
    print("start:", fmt(best), flush=True)
    for it in range(3):
        improved = False
        for k, (_, _, lo, hi) in SEARCH.items():
            for f in (0.6, 0.8, 1.25, 1.6):
                v = vals[k] * f
                if not lo <= v <= hi:
                    continue
                trial = dict(vals, **{k: v})
                s = score(b, data, records(trial))
                if objective(s) > objective(best) + 0.5:
                    best, vals, improved = s, trial, True
                    print(f"pass {it + 1}: {k}={v:.3g}: {fmt(s)}", flush=True)
        if not improved:
            break
    print("best:", " ".join(records(vals)))
    print(fmt(best))


def table(args):
    """Predicted vs measured for every same-host sweep row >= 1 MiB of a perf/results.sh run:
    each row re-measured (median of --rounds runs forced to the sweep's algorithm, the library
    choosing chunk and channels) and predicted on this machine's discovered fabric and on its
    calibrated one (`weftrun -n N weft-topo --calibrate --save`)."""
    b = bin_dir(args)
    rows = []
    for coll in ("allreduce", "allgather", "alltoall", "broadcast", "reducescatter"):
        for n in (2, 4):
            rows += sweep_rows(args.work, f"local-{coll}-{n}", coll, n, True)
    rows += sweep_rows(args.work, "tcp-allreduce-2", "allreduce", 2, False)
    paths = {"discovered": {}, "calibrated": {}}
    for n in (2, 4):
        paths["discovered"][n] = os.path.join(args.work, f"this{n}.topo")
        paths["calibrated"][n] = os.path.join(args.work, f"calibrated{n}.topo")
        subprocess.run([f"{b}/weft-topo", "-n", str(n), "--save", paths["discovered"][n]], capture_output=True)
        subprocess.run([f"{b}/weftrun", "-n", str(n), f"{b}/weft-topo", "--calibrate", "--save",
                        paths["calibrated"][n]], capture_output=True)
    for r in range(args.rounds):
        for row in rows:
            env = {"WEFT_ALGO": f"{row['coll']}:{row['algo']}"}
            if not row["shm"]:
                env["WEFT_SHM_DISABLE"] = "1"
            before = exchange_ns(b)
            row.setdefault("runs", []).append(perf_time(b, row["coll"], row["nranks"], row["bytes"], env))
            after = exchange_ns(b)
            # The slower of the two probes; unknown (nan) when either failed.
            row.setdefault("exchange_ns", []).append(before + after - min(before, after))
    for row in rows:
        ok = [x for x in row["runs"] if not math.isnan(x)]
        row["us"] = statistics.median(ok) if ok else None
        shared = [x for x, ns in zip(row["runs"], row["exchange_ns"]) if not math.isnan(x) and ns < SHARED_CACHE_NS]
        row["us_shared"] = statistics.median(shared) if shared else None
        row["runs_shared"] = len(shared)
        for fabric in paths:
            row[fabric] = predict(b, paths[fabric], row) if os.path.exists(paths[fabric][row["nranks"]]) else None
    json.dump(rows, open(args.out, "w"), indent=0)


# This VM's two vCPUs flip between a placement where they share a cache (a cache line crosses
# in ~50 ns) and one where they do not (~200 ns), for seconds at a time (about 1 probe in 6 over
# 4 minutes, perf/RESULTS.md session 15). Copies between the ranks run up to 2x slower in the
# second; the fabric the model is given describes neither. `table` probes the placement
# (perf/placement) before and after each run, and reports the runs in the shared-cache
# placement beside all of them.
SHARED_CACHE_NS = 100


def exchange_ns(b):
    """The cache-line exchange between the two cores now, in ns (nan when unknown)."""
    try:
        out = subprocess.run([f"{b}/placement"], capture_output=True, text=True, timeout=30).stdout.split()
        return float(out[out.index("exchange_ns") + 1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return float("nan")


def sweep_rows(work, group, coll, n, shm):
    try:
        d = json.load(open(os.path.join(work, f"{group}-weft.json")))
    except (OSError, ValueError):
        return []
    return [dict(coll=coll, nranks=n, bytes=r["size"], algo=r["algo"], shm=shm, group=group,
                 sweep_us=r["out_of_place"]["time_us"])
            for r in d["rows"] if r["size"] >= (1 << 20) and r.get("algo") not in (None, "", "-")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", help="weft's build/bin (default: REPO/build/bin)")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out")
    m.add_argument("--configs", default=os.path.join(REPO, "perf", "model_fit_configs.json"))
    m.add_argument("--rounds", type=int, default=3)
    e = sub.add_parser("evaluate")
    e.add_argument("data")
    e.add_argument("records", nargs="*")
    s = sub.add_parser("search")
    s.add_argument("data")
    t = sub.add_parser("table")
    t.add_argument("work", help="perf/results.sh's work directory (the sweeps' JSON files)")
    t.add_argument("out")
    t.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    {"measure": measure, "evaluate": evaluate, "search": search, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
