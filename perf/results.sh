#!/bin/bash
# perf/results.sh — one command for perf/RESULTS.md: builds what is missing, runs weft-perf and
# its peers (Open MPI, MPICH, Gloo) in the same sweeps on this machine (2 and 4 local ranks),
# the 2x2 and 2x4 network-namespace runs over 2 Gbit/s links when root, the kernel
# microbenchmarks, then writes perf/RESULTS.md (every table with the exact commands, the peer's
# figure from the same run, the ratios) and the PNGs in perf/plots/.
#
#   perf/results.sh [--quick] [--build DIR] [--work DIR] [--no-netns] [--baseline COMMIT]
#                   [--goal-rounds R]
#
# --quick: 2 collectives, fewer sizes (a smoke run of the whole pipeline, ~3 min).
# --baseline COMMIT: also builds COMMIT's weft (in WORK/baseline-*) and runs its weft-perf
#   right after every weft sweep, so each table compares the tree with COMMIT in the same run
#   (the "regression" goal: geometric mean of new/old time per table <= 1.05).
# --goal-rounds R: runs the sweeps that the same-machine goals read R more times (default 3,
#   1 with --quick, 0 = none), weft and its peer back to back, and judges those goals on the
#   median per size (a single sweep row moves by up to 2x between runs here). ~2 min a round.
# Sections of RESULTS.md after the line "<!-- kept by perf/results.sh -->" are hand-written
# (figures of one-off benchmarks) and are carried over unchanged.
# Runtime: ~5 min on a 2-core machine. To stay there each size gets at most 200 iterations and
# at most ~0.25 s of timed calls (weft-perf --time-budget; big sizes run fewer iterations, the
# JSON files record how many), 3 warmups, and every sweep has a time limit.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=/tmp/weft-results-build
WORK=/tmp/weft-results
QUICK=0
NETNS=1
BASELINE=""
GOAL_ROUNDS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --build) BUILD="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --no-netns) NETNS=0; shift ;;
    --baseline) BASELINE="$2"; shift 2 ;;
    --goal-rounds) GOAL_ROUNDS="$2"; shift 2 ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bin"
PLOTS="$REPO/perf/plots"
MD="$REPO/perf/RESULTS.md"
mkdir -p "$WORK" "$PLOTS"
rm -f "$WORK"/*.json "$WORK"/*.txt "$WORK"/*.cmd "$WORK"/*.rc
rm -rf "$WORK/rounds"
START=$(date +%s)
log() { echo "[results $(( $(date +%s) - START ))s] $*" >&2; }

# ---- build ----
# shellcheck source=perf/build_pair.sh
source "$REPO/perf/build_pair.sh"
for t in weftrun weft-perf gloo-perf mpi-perf-openmpi mpi-perf-mpich nccl-perf reduce_bench; do
  if build_tree "$REPO" "$BUILD" "$WORK/build.log" "$t"; then log "built $t"; fi
done

# The baseline's launcher and weft-perf, built from a checkout of COMMIT (kept between runs).
OLD_BIN="" OLD_SHA=""
if [ -n "$BASELINE" ]; then
  build_baseline "$REPO" "$BASELINE" "$WORK" "$WORK/build.log" || exit 1
  OLD_BIN="$BASELINE_BIN" OLD_SHA="$BASELINE_SHA"
  log "baseline $OLD_SHA built in $OLD_BIN"
fi

# ---- sweeps ----
ITERS="-n 200 -w 10 -c 1 --time-budget 0.25"
if [ "$QUICK" = 1 ]; then
  COLLS="allreduce alltoall"
  SIZES_ALLREDUCE="-b 8 -e 4M -f 8"
  SIZES_OTHER="-b 1K -e 1M -f 32"
else
  COLLS="allreduce allgather reducescatter alltoall broadcast"
  SIZES_ALLREDUCE="-b 8 -e 64M -f 2"  # every power of two: 8 B (latency) .. 64 MiB (bandwidth)
  SIZES_OTHER="-b 1K -e 16M -f 8"
fi
SWEEP_LIMIT=240

# run_sweep NAME LABEL COMMAND...: runs one sweep, keeping its text, JSON, command and status.
run_sweep() {
  local name="$1" label="$2"
  shift 2
  local cmd="$* --json $WORK/$name.json --label $label"
  echo "$cmd" >"$WORK/$name.cmd"
  log "$name: $cmd"
  timeout -k 5 "$SWEEP_LIMIT" "$@" --json "$WORK/$name.json" --label "$label" \
    >"$WORK/$name.raw" 2>"$WORK/$name.err"
  local rc=$?
  echo "$rc" >"$WORK/$name.rc"
  # launchers that prefix lines keep rank 0's; the table is printed by rank 0 only
  sed -n -e '/^\[[0-9][0-9]*\] /{ s/^\[0\] //p; d; }' -e p "$WORK/$name.raw" >"$WORK/$name.txt"
  [ "$rc" = 0 ] || log "$name: exit code $rc (stderr: $WORK/$name.err)"
}

sizes_for() { [ "$1" = allreduce ] && echo "$SIZES_ALLREDUCE" || echo "$SIZES_OTHER"; }

for n in 2 4; do
  for c in $COLLS; do
    args="-C $c $(sizes_for "$c") $ITERS"
    # shellcheck disable=SC2086
    {
      [ -x "$BIN/weft-perf" ] && [ -x "$BIN/weftrun" ] &&
        run_sweep "local-$c-$n-weft" weft "$BIN/weftrun" -n "$n" --no-prefix "$BIN/weft-perf" $args
      [ -n "$OLD_BIN" ] &&
        run_sweep "local-$c-$n-weftold" "weft-$OLD_SHA" "$OLD_BIN/weftrun" -n "$n" --no-prefix "$OLD_BIN/weft-perf" $args
      [ -x "$BIN/mpi-perf-openmpi" ] &&
        run_sweep "local-$c-$n-openmpi" openmpi mpirun.openmpi --allow-run-as-root --oversubscribe \
          -np "$n" "$BIN/mpi-perf-openmpi" $args
      [ -x "$BIN/mpi-perf-mpich" ] &&
        run_sweep "local-$c-$n-mpich" mpich mpiexec.mpich -n "$n" "$BIN/mpi-perf-mpich" $args
      [ -x "$BIN/gloo-perf" ] && [ -x "$BIN/weftrun" ] &&
        run_sweep "local-$c-$n-gloo" gloo "$BIN/weftrun" -n "$n" --no-prefix "$BIN/gloo-perf" $args
    }
  done
done

# TCP only (issue: weft's TCP transport against Gloo's, 2 ranks over loopback).
args="-C allreduce $SIZES_ALLREDUCE $ITERS"
# shellcheck disable=SC2086
{
  run_sweep "tcp-allreduce-2-weft" weft env WEFT_SHM_DISABLE=1 "$BIN/weftrun" -n 2 --no-prefix "$BIN/weft-perf" $args
  [ -n "$OLD_BIN" ] &&
    run_sweep "tcp-allreduce-2-weftold" "weft-$OLD_SHA" env WEFT_SHM_DISABLE=1 "$OLD_BIN/weftrun" -n 2 --no-prefix "$OLD_BIN/weft-perf" $args
  [ -x "$BIN/gloo-perf" ] &&
    run_sweep "tcp-allreduce-2-gloo" gloo "$BIN/weftrun" -n 2 --no-prefix "$BIN/gloo-perf" $args
}

# Goal rounds (--goal-rounds): the sweeps the same-machine goals read, again, R times; each
# round runs weft and then its peer, so both see the same minute of this shared machine.
[ -n "$GOAL_ROUNDS" ] || { [ "$QUICK" = 1 ] && GOAL_ROUNDS=1 || GOAL_ROUNDS=3; }
goal_round() {
  local d="$WORK/rounds/$1" args
  mkdir -p "$d"
  args="-C allreduce $SIZES_ALLREDUCE $ITERS"
  # shellcheck disable=SC2086
  for n in 2 4; do
    run_sweep "rounds/$1/local-allreduce-$n-weft" weft "$BIN/weftrun" -n "$n" --no-prefix "$BIN/weft-perf" $args
    run_sweep "rounds/$1/local-allreduce-$n-openmpi" openmpi mpirun.openmpi --allow-run-as-root --oversubscribe \
      -np "$n" "$BIN/mpi-perf-openmpi" $args
    run_sweep "rounds/$1/local-alltoall-$n-weft" weft "$BIN/weftrun" -n "$n" --no-prefix "$BIN/weft-perf" \
      -C alltoall -b "$((n << 20))" -e 16M -f 2 $ITERS
    run_sweep "rounds/$1/local-alltoall-$n-openmpi" openmpi mpirun.openmpi --allow-run-as-root --oversubscribe \
      -np "$n" "$BIN/mpi-perf-openmpi" -C alltoall -b "$((n << 20))" -e 16M -f 2 $ITERS
  done
  # shellcheck disable=SC2086
  {
    run_sweep "rounds/$1/tcp-allreduce-2-weft" weft env WEFT_SHM_DISABLE=1 "$BIN/weftrun" -n 2 --no-prefix \
      "$BIN/weft-perf" -C allreduce -b 8 -e 64M -f 8388608 $ITERS
    run_sweep "rounds/$1/tcp-allreduce-2-gloo" gloo "$BIN/weftrun" -n 2 --no-prefix "$BIN/gloo-perf" \
      -C allreduce -b 8 -e 64M -f 8388608 $ITERS
  }
}
if [ -x "$BIN/mpi-perf-openmpi" ] && [ -x "$BIN/gloo-perf" ] && [ -x "$BIN/weft-perf" ]; then
  for i in $(seq "$GOAL_ROUNDS"); do
    log "goal round $i of $GOAL_ROUNDS"
    goal_round "$i"
  done
fi

# Predicted vs measured (the cost model): every same-host sweep row >= 1 MiB re-measured (median
# of 5 runs forced to the sweep's algorithm) and predicted on this machine's discovered and
# calibrated fabrics (perf/model_fit.py; it also saves this$n.topo, which the table's commands
# name). The memory-bandwidth bounds are measured while writing RESULTS.md.
log "model: predicted vs measured rows (perf/model_fit.py table)"
python3 "$REPO/perf/model_fit.py" --bin "$BIN" table "$WORK" "$WORK/model.json" --rounds 5 \
  >"$WORK/model.log" 2>&1 || log "model rows failed (see $WORK/model.log)"

NETNS_NOTE=""
if [ "$NETNS" = 1 ] && [ "$(id -u)" = 0 ]; then
  for r in 2 4; do
    args="-C allreduce $SIZES_ALLREDUCE $ITERS"
    for b in weft gloo; do
      [ -x "$BIN/$b-perf" ] || continue
      # weft is told the shaped link through a topology file (tbf is invisible to discovery:
      # veth reports 10 Gbit/s), exactly as a user fixes a misreported VM/container topology.
      topo=()
      [ "$b" = weft ] && topo=(env "WEFT_TOPO_FILE=preset:netns:2x$r@2")
      # shellcheck disable=SC2086
      run_sweep "netns-allreduce-2x$r-$b" "$b" "${topo[@]}" bash "$REPO/perf/netns/run.sh" --hosts 2 \
        --ranks-per-host "$r" --rate 2gbit --timeout "$SWEEP_LIMIT" -- "$BIN/$b-perf" $args
    done
    # The baseline commit over the same links and topology file (its row in the goals table).
    # shellcheck disable=SC2086
    [ -n "$OLD_BIN" ] &&
      run_sweep "netns-allreduce-2x$r-weftold" "weft-$OLD_SHA" env "WEFT_TOPO_FILE=preset:netns:2x$r@2" \
        bash "$REPO/perf/netns/run.sh" --hosts 2 --ranks-per-host "$r" --rate 2gbit \
        --timeout "$SWEEP_LIMIT" -- "$OLD_BIN/weft-perf" $args
  done
else
  NETNS_NOTE="Namespace runs skipped (not root, or --no-netns)."
fi

# ---- kernel microbenchmarks ----
if [ -x "$BIN/reduce_bench" ]; then
  echo "$BIN/reduce_bench --benchmark_min_time=0.1" >"$WORK/microbench.cmd"
  log "microbench: reduce_bench"
  timeout 300 "$BIN/reduce_bench" --benchmark_min_time=0.1 >"$WORK/microbench.txt" 2>&1
  echo $? >"$WORK/microbench.rc"
fi

# ---- plots ----
rm -f "$PLOTS"/*.png
declare -A PLOTTED=()
for f in "$WORK"/*.cmd; do
  [ -e "$f" ] || continue
  group=$(basename "$f" .cmd)
  group=${group%-*}
  [ "$group" = microbench ] || [ -n "${PLOTTED[$group]:-}" ] && continue
  PLOTTED[$group]=1
  files=()
  for b in weft weftold openmpi mpich gloo nccl; do
    [ -s "$WORK/$group-$b.json" ] && files+=("$WORK/$group-$b.json")
  done
  [ ${#files[@]} -gt 0 ] &&
    bash "$REPO/perf/plot.sh" -o "$PLOTS/$group.png" -t "$group (out of place)" "${files[@]}" \
      >/dev/null 2>>"$WORK/plot.log"
done

# ---- RESULTS.md ----
log "writing $MD"
WEFT_RESULTS_BIN="$BIN" python3 - "$WORK" "$MD" "$REPO" "$(( $(date +%s) - START ))" "$NETNS_NOTE" <<'EOF'
import glob, json, os, platform, statistics, subprocess, sys
sys.path.insert(0, os.path.join(sys.argv[3], "perf"))
import compare
import model_fit  # its weft-sim row parser
work, md_path, repo, elapsed, netns_note = sys.argv[1:6]

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""

def read(p, default=""):
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return default

cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
mem = sh("free -g | awk '/Mem/ {print $2}'")
load = sh("cut -d' ' -f1-3 /proc/loadavg")
commit = sh(f"git -C {repo} rev-parse --short HEAD")
date = sh("date -u +%Y-%m-%dT%H:%MZ")
ompi = sh("mpirun.openmpi --version 2>/dev/null | head -1")
mpich = sh("mpichversion 2>/dev/null | grep -m1 Version | cut -f2") or "(not installed)"
gloo = sh("dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null")
out = []
w = out.append
w("# weft performance results\n")
w("Generated by `perf/results.sh` (the one command that rebuilds, reruns and rewrites this "
  "file and `perf/plots/*.png`). Raw outputs: the `--json` files named in each command.\n")
w(f"- Date: {date}; commit `{commit}`; total runtime {elapsed} s")
w(f"- Machine: {cpu}, {os.cpu_count()} cores, {mem} GiB, Linux {platform.release()}; "
  f"load average at the end: {load}")
w(f"- Peers: {ompi}; MPICH {mpich}; Gloo from Debian libgloo-dev {gloo}")
w("")
w("## How to read this\n")
w("- Rows are nccl-tests' (size = total bytes as nccl-tests defines it per collective; time = "
  "average per call, max over ranks; busbw factors as nccl-tests). Every value was checked "
  "exactly (`-c 1`, inputs chosen so sums are exact); `#wrong` was 0 unless a table says so.")
w("- Time ratio = peer time / weft time; busbw ratio = weft busbw / peer busbw: above 1 means "
  "weft is faster. Peers ran in the same script run, one after the other, with the same options.")
w("- Caveats: this is a small shared VM (2 cores, other jobs running), so 4 ranks oversubscribe "
  "the cores: busy-polling libraries (MPI) and sleeping ones (Gloo's epoll thread) suffer "
  "differently, and small-message times carry scheduler noise of milliseconds. "
  "Each size ran at most 200 timed iterations and ~0.25 s of timed calls (`--time-budget`): "
  "big sizes ran fewer iterations (the `iters` field of each JSON row says how many).")
w("- Gloo: allreduce is `gloo::allreduce` (ring, what PyTorch's ProcessGroupGloo calls); "
  "reduce-scatter is `ReduceScatterHalvingDoubling`, in place, so its out-of-place time "
  "includes a copy in and out; Gloo and MPI have no avg (sum + local division).")
w("- MPI runs are local only (`mpirun` cannot place ranks in our namespaces); the namespace "
  "runs compare weft with Gloo.")
if netns_note:
    w(f"- {netns_note}")
w("")

goals_at = len(out)

def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

groups = []
for cmdfile in sorted(glob.glob(os.path.join(work, "*.cmd"))):
    name = os.path.basename(cmdfile)[:-4]
    if name == "microbench":
        continue
    group = name.rsplit("-", 1)[0]
    if group not in groups:
        groups.append(group)

def order(g):
    kind = {"local": 0, "tcp": 1}.get(g.split("-")[0], 2)
    return (kind, g)

for group in sorted(groups, key=order):
    parts = group.split("-")
    where = {"local": "this machine (shared memory between ranks)",
             "tcp": "this machine, TCP over loopback only (weft with WEFT_SHM_DISABLE=1)"}.get(
        parts[0], "2 namespaces joined by 2 Gbit/s tbf links (weft given WEFT_TOPO_FILE=preset:netns:2xR@2)")
    w(f"## {group}: {parts[1]}, {parts[2]} ranks, {where}\n")
    png = os.path.join("plots", group + ".png")
    if os.path.exists(os.path.join(repo, "perf", png)):
        w(f"![{group}]({png})\n")
    docs = {}
    w("Commands (in this order, same run):\n")
    w("```")
    for b in ["weft", "weftold", "openmpi", "mpich", "gloo", "nccl"]:
        base = os.path.join(work, f"{group}-{b}")
        if not os.path.exists(base + ".cmd"):
            continue
        w(read(base + ".cmd").strip())
        rc = read(base + ".rc", "?").strip()
        d = load(base + ".json")
        if rc != "0" or d is None:
            err = read(base + ".err").strip().splitlines()[-3:]
            w(f"#   -> exit code {rc}" + (": " + " | ".join(err) if err else ""))
        if d is not None:
            docs[b] = d
    w("```\n")
    if "weft" in docs:
        base, peers = docs["weft"], [docs[b] for b in ["weftold", "openmpi", "mpich", "gloo", "nccl"] if b in docs]
    else:
        avail = [docs[b] for b in ["openmpi", "mpich", "gloo", "nccl"] if b in docs]
        base, peers = (avail[0], avail[1:]) if avail else (None, [])
        if base is not None:
            w(f"weft produced no result here; the peers are compared with {base['backend']}.\n")
    if base is None:
        w("No backend produced a result.\n")
        continue
    if not peers:
        w(f"Only {base['backend']} ran:\n")
        w("```")
        w(read(os.path.join(work, f"{group}-{base['backend']}.txt")).strip())
        w("```\n")
        continue
    import io
    buf = io.StringIO()
    summary = compare.compare(base, peers, "oop", True, out=buf)
    w(buf.getvalue())
    for d in [base] + peers:
        if d.get("wrong"):
            w(f"**{d['backend']}: {d['wrong']} wrong values in this sweep.**\n")
    w("<details><summary>weft-perf's own table (nccl-tests layout, both placements)</summary>\n")
    w("```")
    w(read(os.path.join(work, f"{group}-{base['backend']}.txt")).strip())
    w("```\n</details>\n")

# ---- the issues' goals, computed from this run's files ----
def row_of(d, size):
    for r in (d or {}).get("rows", []):
        if r["size"] == size:
            return r
    return None

def sweep_data(group, backend):
    return load(os.path.join(work, f"{group}-{backend}.json"))

# The goal rounds (perf/results.sh, "goal rounds"): the same sweeps again, each round weft and
# its peer back to back; per group, backend and size the median out-of-place time over rounds.
round_dirs = sorted(glob.glob(os.path.join(work, "rounds", "*")))
def rounds_data(group, backend):
    runs = [d for d in (load(os.path.join(r, f"{group}-{backend}.json")) for r in round_dirs) if d]
    if not runs:
        return None
    rows = []
    for r in runs[0]["rows"]:
        ts = [x["out_of_place"]["time_us"] for x in (row_of(d, r["size"]) for d in runs) if x]
        rows.append({"size": r["size"], "out_of_place": {"time_us": statistics.median(ts)}, "runs": len(ts)})
    return {"backend": runs[0].get("backend", backend), "rows": rows}

def same_host_goals(data):
    """The same-machine goals on one data source: (name, value, target, ok) each."""
    rows = []
    def goal(name, value, target, ok):
        rows.append((name, value, target, ok))
    def t(group, backend, size):
        r = row_of(data(group, backend), size)
        return r["out_of_place"]["time_us"] if r else None
    a, b = t("tcp-allreduce-2", "weft", M64), t("tcp-allreduce-2", "gloo", M64)
    if a and b:
        goal("TCP, 2 ranks, allreduce 64 MiB: weft busbw / Gloo busbw (issue 17; issue 2 asked >= 1)", f"{b / a:.2f}x", ">= 1.5", b / a >= 1.5)
    a, b = t("tcp-allreduce-2", "weft", 8), t("tcp-allreduce-2", "gloo", 8)
    if a and b:
        goal("TCP, 2 ranks, allreduce 8 B: weft latency / Gloo latency (issue 17; issue 2 asked <= 0.5)", f"{a / b:.2f} ({a:.1f} vs {b:.1f} us)", "<= 1/3", a / b <= 1 / 3)
    a, b = t("local-allreduce-2", "weft", M64), t("local-allreduce-2", "openmpi", M64)
    if a and b:
        # The sweeps use plain (unregistered) buffers: issue 17 asks >= 3x there; its >= 5x and
        # 60%-of-the-bound goals are for registered buffers (perf/registered_vs_openmpi.sh).
        goal("shm, 2 ranks, allreduce 64 MiB, unregistered buffers: weft busbw / Open MPI busbw", f"{b / a:.2f}x", ">= 3", b / a >= 3)
    if a:
        txt = sh(f"{os.environ.get('WEFT_RESULTS_BIN', '')}/membound {M64} 2").split()
        try:
            bnd = float(txt[txt.index("bound_us") + 1])
            goal("shm, 2 ranks, allreduce 64 MiB, unregistered buffers: memory bound / weft time (the goal is for registered buffers)",
                 f"{bnd / a:.2f} ({bnd:.0f} / {a:.0f} us)", "-", None)
        except (ValueError, IndexError):
            pass
    worst = None
    for size in [8, 16, 32, 64, 128, 256, 512, 1024]:
        a, b = t("local-allreduce-2", "weft", size), t("local-allreduce-2", "openmpi", size)
        if a and b and (worst is None or a / b > worst[0]):
            worst = (a / b, size, a, b)
    if worst:
        goal("shm, 2 ranks, allreduce 8 B..1 KiB: worst weft latency / Open MPI latency",
             f"{worst[0]:.2f} at {worst[1]} B ({worst[2]:.2f} vs {worst[3]:.2f} us)", "<= 1", worst[0] <= 1)
    dw, do = data("local-allreduce-4", "weft"), data("local-allreduce-4", "openmpi")
    if dw and do:
        slower = [r["size"] for r in dw["rows"] if row_of(do, r["size"]) and
                  row_of(do, r["size"])["out_of_place"]["time_us"] < r["out_of_place"]["time_us"]]
        goal("shm, 4 ranks on 2 cores, allreduce 8 B..64 MiB: sizes where Open MPI is faster",
             (", ".join(str(x) for x in slower) or "none") + f" ({len(slower)} of {len(dw['rows'])})", "none", not slower)
    for n in (2, 4):
        dw, do = data(f"local-alltoall-{n}", "weft"), data(f"local-alltoall-{n}", "openmpi")
        if dw and do:
            ratios = [(row_of(do, r["size"])["out_of_place"]["time_us"] / r["out_of_place"]["time_us"], r["size"])
                      for r in dw["rows"] if r["size"] >= (1 << 20) * n and row_of(do, r["size"])]
            if ratios:
                lo = min(ratios)
                goal(f"shm, {n} ranks, alltoall >= 1 MiB per rank, unregistered buffers: weft busbw / Open MPI busbw (lowest)",
                     f"{lo[0]:.2f}x at {lo[1]} B", ">= 2", lo[0] >= 2)
    return rows

goal_rows = []
def goal(name, value, target, ok, rounds=None):
    """rounds: the goal again on the rounds' medians, (value, ok); it then decides the status."""
    verdict = rounds[1] if rounds else ok
    status = "for the record" if verdict is None else ("met" if verdict else "**missed**")
    goal_rows.append(f"| {name} | {value} | {rounds[0] if rounds else '-'} | {target} | {status} |")

M64 = 64 << 20
from_rounds = {g[0]: (g[1], g[3]) for g in same_host_goals(rounds_data)} if round_dirs else {}
for name, value, target, ok in same_host_goals(sweep_data):
    goal(name, value, target, ok, from_rounds.get(name))
for r, limit in ((2, 1.15), (4, 1.2)):
    a = (row_of(sweep_data(f"netns-allreduce-2x{r}", "weft"), M64) or {}).get("out_of_place", {}).get("time_us")
    b = (row_of(sweep_data(f"netns-allreduce-2x{r}", "gloo"), M64) or {}).get("out_of_place", {}).get("time_us")
    link_bound = M64 / 250.0  # each host sends S across its 2 Gbit/s (250 bytes/us) link
    if a:
        goal(f"2 hosts x {r} ranks, 2 Gbit/s, allreduce 64 MiB: weft time / link bound",
             f"{a / link_bound:.2f} ({a / 1e3:.0f} ms vs {link_bound / 1e3:.0f} ms)", f"<= {limit}", a / link_bound <= limit)
    if a and b and r == 2:
        goal("2 hosts x 2 ranks, allreduce 64 MiB: Gloo time / weft time", f"{b / a:.2f}x", ">= 1.4", b / a >= 1.4)
# The tree against the baseline commit (--baseline): per table, the geometric mean over sizes
# of new/old out-of-place time (<= 1.05: no table slower by more than 5%).
for group in sorted(groups, key=order):
    dn, do_ = load(os.path.join(work, f"{group}-weft.json")), load(os.path.join(work, f"{group}-weftold.json"))
    if not dn or not do_:
        continue
    rs = [r["out_of_place"]["time_us"] / row_of(do_, r["size"])["out_of_place"]["time_us"]
          for r in dn["rows"] if row_of(do_, r["size"]) and row_of(do_, r["size"])["out_of_place"]["time_us"]]
    gm = compare.geomean(rs)
    if gm:
        goal(f"{group}: weft time / {do_['backend']} time, geometric mean over {len(rs)} sizes", f"{gm:.2f}", "<= 1.05", gm <= 1.05)
# The cost model (perf/model_fit.py table): rows within 15% of their re-measured time.
try:
    model_json = json.load(open(os.path.join(work, "model.json")))
except (OSError, ValueError):
    model_json = []
for fabric in ("calibrated", "discovered"):
    pairs = [(r[fabric], r["us"]) for r in model_json if r.get(fabric) and r.get("us")]
    shared = [(r[fabric], r["us_shared"]) for r in model_json if r.get(fabric) and r.get("us_shared")]
    if pairs:
        k = sum(abs(p - m) <= 0.15 * m for p, m in pairs)
        ks = sum(abs(p - m) <= 0.15 * m for p, m in shared)
        goal(f"cost model, {fabric} fabric: same-host rows >= 1 MiB predicted within 15% of measured "
             "(in brackets: of the runs in the shared-cache placement)",
             f"{k} of {len(pairs)} ({ks} of {len(shared)})", "all", k == len(pairs))
if goal_rows:
    g_out = []
    w = g_out.append
    w("## Goals of the issues, from this run\n")
    w("Each value is computed from the sweeps below (out-of-place times); the link bound is the "
      "bytes each host must send across its link (S for an allreduce over 2 hosts) divided by "
      "the 2 Gbit/s rate. A sweep takes one sample per size, and on this shared VM a row moves by "
      "up to 2x between runs, so the same-machine goals are computed again from the goal rounds: "
      f"{len(round_dirs)} more run{'s' if len(round_dirs) != 1 else ''} of the sweeps they read, weft and its peer back to back in "
      "each round, the median time per size over the rounds. Where there are rounds, their "
      "median decides met or missed. Where a goal is missed, the issue notes say by how much and why.\n")
    w("| goal | this run's sweep | median of the goal rounds | target | |")
    w("|---|---|---|---|---|")
    for g in goal_rows:
        w(g)
    w("")
    out[goals_at:goals_at] = g_out  # right after "How to read this"
    w = out.append

# ---- same-host allreduce against the memory-bandwidth bound ----
def bound_us(n, size):
    if not os.environ.get("WEFT_RESULTS_BIN"):
        return None
    txt = sh(f"{os.environ['WEFT_RESULTS_BIN']}/membound {size} {n}").split()
    try:
        return float(txt[txt.index("bound_us") + 1])
    except (ValueError, IndexError):
        return None

rows = []
for n in (2, 4):
    d = load(os.path.join(work, f"local-allreduce-{n}-weft.json"))
    if not d:
        continue
    for r in d["rows"]:
        if r["size"] < (1 << 20):
            continue
        b = bound_us(n, r["size"])
        if b is None:
            continue
        o, i = r["out_of_place"]["time_us"], r["in_place"]["time_us"]
        rows.append(f"| {n} | {r['size']} | {r.get('algo', '-')} | {o:.0f} | {i:.0f} | {b:.0f} | "
                    f"{b / o:.2f} | {b / i:.2f} |")
if rows:
    w("## Same-host allreduce against the memory-bandwidth bound\n")
    w("Bound = the time this machine needs for the minimum memory traffic of the call: every "
      "rank's input read once and every rank's output written once, i.e. RANKS concurrent "
      "copies of SIZE bytes (`perf/membound.cc`, weft's fastest copy), measured in this run: "
      "`bin/membound SIZE RANKS`. Fraction = bound / weft time (1.0 = at the bound).\n")
    w("| ranks | size (B) | weft algorithm | weft out-of-place (us) | weft in-place (us) | bound (us) | fraction oop | fraction in-place |")
    w("|---|---|---|---|---|---|---|---|")
    for row in rows:
        w(row)
    w("")

# ---- predicted (selector's model / weft-sim) vs measured ----
def predicted(args):
    return model_fit.sim_row(sh(args))

bin_dir = os.environ.get("WEFT_RESULTS_BIN", "")
labels = {"local": "shm", "tcp": "TCP loopback"}
def pct(p, m):
    return f"{(p - m) / m * 100:+.0f}%" if p and m else "-"
vrows, within = [], {"discovered": [0, 0, 0, 0], "calibrated": [0, 0, 0, 0]}
try:
    model_rows = json.load(open(os.path.join(work, "model.json")))
except (OSError, ValueError):
    model_rows = []
for r in model_rows:
    setup = f"{labels[r['group'].split('-')[0]]}, {r['coll']}, {r['nranks']} ranks"
    for fabric in within:
        if r.get(fabric) and r.get("us"):
            within[fabric][0] += abs(r[fabric] - r["us"]) <= 0.15 * r["us"]
            within[fabric][1] += 1
        if r.get(fabric) and r.get("us_shared"):
            within[fabric][2] += abs(r[fabric] - r["us_shared"]) <= 0.15 * r["us_shared"]
            within[fabric][3] += 1
    us = f"{r['us']:.0f}" if r.get("us") else "-"
    shared_cell = (f"{r['us_shared']:.0f} ({r['runs_shared']}; calibrated {pct(r['calibrated'], r['us_shared'])}, "
          f"discovered {pct(r['discovered'], r['us_shared'])})") if r.get("us_shared") else "-"
    vrows.append(f"| {setup} | {r['bytes']} | {r['algo']} | {r['sweep_us']:.0f} | {us} | "
                 f"{r['calibrated'] or 0:.0f} ({pct(r['calibrated'], r['us'])}) | "
                 f"{r['discovered'] or 0:.0f} ({pct(r['discovered'], r['us'])}) | {shared_cell} |")
# Namespace rows: their sweep's time (the namespaces are gone by now), the preset's prediction.
for group, topo, label in [("netns-allreduce-2x2", "--preset netns:2x2@2", "2x2 namespaces, 2 Gbit/s, allreduce"),
                           ("netns-allreduce-2x4", "--preset netns:2x4@2", "2x4 namespaces, 2 Gbit/s, allreduce")]:
    d = load(os.path.join(work, f"{group}-weft.json"))
    if not d or not bin_dir:
        continue
    for r in d["rows"]:
        if r["size"] < (1 << 20):
            continue
        algo = r.get("algo", "-")
        meas = r["out_of_place"]["time_us"]
        cmd = (f"{bin_dir}/weft-sim {topo} -C allreduce -b {r['size']} -e {r['size']}"
               + (f" -a {algo}" if algo not in ("-", "") else ""))
        palgo, pt = predicted(cmd)
        if pt is None:
            continue
        vrows.append(f"| {label} | {r['size']} | {algo} | {meas:.0f} | - | {pt:.0f} ({pct(pt, meas)}, preset) | - | - |")
if vrows:
    w("## Predicted (cost model) vs measured\n")
    w("Measured = weft-perf out-of-place time, median of 5 runs of that size alone with the sweep's "
      "algorithm forced (`WEFT_ALGO=COLL:ALGO`, the library choosing chunk and channels), run by "
      "`perf/model_fit.py table`; the sweep's own single sample beside it (a sweep row on this shared VM "
      "moves by up to 2x between runs). Predicted = `weft-sim --topo-file FILE -C COLL -b SIZE -e SIZE "
      "-a ALGO` (`--no-shm` for TCP): the same chunk and channels, on this machine's calibrated fabric "
      "(`weftrun -n RANKS weft-topo --calibrate --save calibratedRANKS.topo`, what `WEFT_CALIBRATE=1` "
      "gives a job) and on the discovered one (`weft-topo -n RANKS --save thisRANKS.topo`, the "
      "defaults the selector uses without calibration). Namespace rows: the sweep's time against the "
      "`netns:2xR@2` preset. Goal (issue 17): within 15% for every row >= 1 MiB. The last column: "
      "the median of those runs made while the VM's two vCPUs shared a cache (`perf/placement` "
      "before and after the run under 100 ns; the number of such runs in brackets) and the "
      "predictions' error against it. The vCPUs spend seconds at a time in a placement without a "
      "shared cache, where copies between the ranks run up to 2x slower; neither fabric describes "
      "it.\n")
    for fabric, (k, n, ks, ns) in within.items():
        if n:
            w(f"- {fabric} fabric: {k} of {n} same-host rows within 15%; against the runs in the "
              f"shared-cache placement, {ks} of {ns}")
    w("")
    w("| setup | size (B) | algorithm | sweep (us) | measured, median of 5 (us) | predicted, calibrated (us) | predicted, discovered (us) | measured, shared-cache placement (us) |")
    w("|---|---|---|---|---|---|---|---|")
    for row in vrows:
        w(row)
    w("")

mb = read(os.path.join(work, "microbench.txt"))
if mb:
    w("## Kernel microbenchmarks\n")
    w("```")
    w(read(os.path.join(work, "microbench.cmd")).strip())
    w("```\n")
    w("```")
    w(mb.strip())
    w("```\n")

# Hand-written sections (one-off benchmarks with their own commands) are carried over.
KEEP = "<!-- kept by perf/results.sh -->"
old = read(md_path)
if KEEP in old:
    out.append(old[old.index(KEEP):].rstrip("\n"))
with open(md_path, "w") as f:
    f.write("\n".join(out) + "\n")
EOF
log "done: $MD, $PLOTS/*.png (raw files in $WORK)"
