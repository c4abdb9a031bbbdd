#!/bin/bash
# perf/results.sh — one command for perf/RESULTS.md: builds what is missing, runs weft-perf and
# its peers (Open MPI, MPICH, Gloo) in the same sweeps on this machine (2 and 4 local ranks),
# the 2x2 and 2x4 network-namespace runs over 2 Gbit/s links when root, the kernel
# microbenchmarks, then writes perf/RESULTS.md (every table with the exact commands, the peer's
# figure from the same run, the ratios) and the PNGs in perf/plots/.
#
#   perf/results.sh [--quick] [--build DIR] [--work DIR] [--no-netns]
#
# --quick: 2 collectives, fewer sizes (a smoke run of the whole pipeline, ~3 min).
# Runtime: ~15 min on a 2-core machine. To stay there each size gets at most 20 iterations and
# at most ~0.25 s of timed calls (weft-perf --time-budget; big sizes run fewer iterations, the
# JSON files record how many), 3 warmups, and every sweep has a time limit.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=/tmp/weft-results-build
WORK=/tmp/weft-results
QUICK=0
NETNS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --build) BUILD="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --no-netns) NETNS=0; shift ;;
    *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bin"
PLOTS="$REPO/perf/plots"
MD="$REPO/perf/RESULTS.md"
mkdir -p "$WORK" "$PLOTS"
rm -f "$WORK"/*.json "$WORK"/*.txt "$WORK"/*.cmd "$WORK"/*.rc
START=$(date +%s)
log() { echo "[results $(( $(date +%s) - START ))s] $*" >&2; }

# ---- build ----
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  log "configuring $BUILD"
  cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$WORK/build.log" 2>&1 ||
    { log "cmake configure failed: $WORK/build.log"; exit 1; }
fi
for t in weftrun weft-perf gloo-perf mpi-perf-openmpi mpi-perf-mpich nccl-perf reduce_bench; do
  if cmake --build "$BUILD" -j2 --target "$t" >>"$WORK/build.log" 2>&1; then
    log "built $t"
  else
    log "could not build $t (see $WORK/build.log)"
  fi
done

# ---- sweeps ----
ITERS="-n 20 -w 3 -c 1 --time-budget 0.25"
if [ "$QUICK" = 1 ]; then
  COLLS="allreduce alltoall"
  SIZES_ALLREDUCE="-b 8 -e 4M -f 8"
  SIZES_OTHER="-b 1K -e 1M -f 32"
else
  COLLS="allreduce allgather reducescatter alltoall broadcast"
  SIZES_ALLREDUCE="-b 8 -e 64M -f 4"
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

NETNS_NOTE=""
if [ "$NETNS" = 1 ] && [ "$(id -u)" = 0 ]; then
  for r in 2 4; do
    args="-C allreduce $SIZES_ALLREDUCE $ITERS"
    for b in weft gloo; do
      [ -x "$BIN/$b-perf" ] || continue
      # shellcheck disable=SC2086
      run_sweep "netns-allreduce-2x$r-$b" "$b" bash "$REPO/perf/netns/run.sh" --hosts 2 \
        --ranks-per-host "$r" --rate 2gbit --timeout "$SWEEP_LIMIT" -- "$BIN/$b-perf" $args
    done
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
  for b in weft openmpi mpich gloo nccl; do
    [ -s "$WORK/$group-$b.json" ] && files+=("$WORK/$group-$b.json")
  done
  [ ${#files[@]} -gt 0 ] &&
    bash "$REPO/perf/plot.sh" -o "$PLOTS/$group.png" -t "$group (out of place)" "${files[@]}" \
      >/dev/null 2>>"$WORK/plot.log"
done

# ---- RESULTS.md ----
log "writing $MD"
python3 - "$WORK" "$MD" "$REPO" "$(( $(date +%s) - START ))" "$NETNS_NOTE" <<'EOF'
import glob, json, os, platform, subprocess, sys
sys.path.insert(0, os.path.join(sys.argv[3], "perf"))
import compare
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
  "Each size ran at most 20 timed iterations and ~0.25 s of timed calls (`--time-budget`): "
  "big sizes ran fewer iterations (the `iters` field of each JSON row says how many).")
w("- Gloo: allreduce is `gloo::allreduce` (ring, what PyTorch's ProcessGroupGloo calls); "
  "reduce-scatter is `ReduceScatterHalvingDoubling`, in place, so its out-of-place time "
  "includes a copy in and out; Gloo and MPI have no avg (sum + local division).")
w("- MPI runs are local only (`mpirun` cannot place ranks in our namespaces); the namespace "
  "runs compare weft with Gloo.")
if netns_note:
    w(f"- {netns_note}")
w("")

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
    kind = 0 if g.startswith("local") else 1
    return (kind, g)

for group in sorted(groups, key=order):
    parts = group.split("-")
    where = "this machine" if parts[0] == "local" else "2 namespaces joined by 2 Gbit/s tbf links"
    w(f"## {group}: {parts[1]}, {parts[2]} ranks, {where}\n")
    png = os.path.join("plots", group + ".png")
    if os.path.exists(os.path.join(repo, "perf", png)):
        w(f"![{group}]({png})\n")
    docs = {}
    w("Commands (in this order, same run):\n")
    w("```")
    for b in ["weft", "openmpi", "mpich", "gloo", "nccl"]:
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
        base, peers = docs["weft"], [docs[b] for b in ["openmpi", "mpich", "gloo", "nccl"] if b in docs]
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

mb = read(os.path.join(work, "microbench.txt"))
if mb:
    w("## Kernel microbenchmarks\n")
    w("```")
    w(read(os.path.join(work, "microbench.cmd")).strip())
    w("```\n")
    w("```")
    w(mb.strip())
    w("```\n")

with open(md_path, "w") as f:
    f.write("\n".join(out) + "\n")
EOF
log "done: $MD, $PLOTS/*.png (raw files in $WORK)"
