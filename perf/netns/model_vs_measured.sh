#!/bin/bash
# perf/netns/model_vs_measured.sh — the cost model against measurement, with the model's
# constants refit by calibration (weft-topo --calibrate), for one setup:
#
#   model_vs_measured.sh BIN_DIR OUT_DIR SETUP [MIN_BYTES MAX_BYTES]
#     SETUP: shm2 | shm4 | tcp2 | netns2x2 | netns2x4   (MIN/MAX default 1M 64M)
#
# Steps, in one run: (1) calibrate the job's fabric (the same launcher and ranks as the
# sweep) into OUT_DIR/SETUP.topo; (2) weft-perf allreduce sweep with WEFT_TOPO_FILE set to it
# (OUT_DIR/SETUP.json); (3) weft-sim on the calibrated file, per size: the selector's own
# candidate (algorithm, chunk, channels), which is what the sweep ran since it loaded the same
# file; when weft-sim's algorithm differs from the one the sweep reports, the sweep's
# algorithm unchunked (marked "forced"). Prints a markdown table: size, algorithm, chunk,
# measured, predicted, error. The netns setups need root (perf/netns/run.sh; 2 Gbit/s tbf).
set -eu
[ $# -ge 3 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
BIN="$1" OUT="$2" SETUP="$3" MIN="${4:-1M}" MAX="${5:-64M}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"
TOPO="$OUT/$SETUP.topo"
SIMFLAGS=""
case "$SETUP" in
  shm2) LAUNCH=("$BIN/weftrun" -n 2) ;;
  shm4) LAUNCH=("$BIN/weftrun" -n 4) ;;
  tcp2) LAUNCH=(env WEFT_SHM_DISABLE=1 "$BIN/weftrun" -n 2); SIMFLAGS="--no-shm" ;;
  netns2x2) LAUNCH=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host 2 --rate 2gbit --timeout 600 --) ;;
  netns2x4) LAUNCH=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host 4 --rate 2gbit --timeout 600 --) ;;
  *) echo "model_vs_measured.sh: unknown SETUP '$SETUP' (shm2 shm4 tcp2 netns2x2 netns2x4)" >&2; exit 2 ;;
esac

# PREDICT_ONLY=1: keep OUT_DIR's calibration and sweep, only redo the predictions (another
# build's weft-sim on the same measurements).
if [ "${PREDICT_ONLY:-0}" != 1 ]; then
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
start=$(date +%s.%N)
"${LAUNCH[@]}" "$BIN/weft-topo" --calibrate --save "$TOPO" -C broadcast > "$OUT/$SETUP.calibration.txt" 2>&1
echo "# calibration job (launch + init + probes + save): $(echo "$(date +%s.%N) - $start" | bc) s" >&2
sed -n '/^\(\[0\] \)\{0,1\}Calibration/,/calibration took/p' "$OUT/$SETUP.calibration.txt" >&2
WEFT_TOPO_FILE="$TOPO" "${LAUNCH[@]}" "$BIN/weft-perf" -C allreduce -b "$MIN" -e "$MAX" -f 2 -n 20 -w 3 -c 1 \
  --time-budget 0.5 --json "$OUT/$SETUP.json" --label weft > "$OUT/$SETUP.perf.txt" 2>&1
echo "# load after the sweep: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
fi

python3 - "$OUT/$SETUP.json" "$BIN/weft-sim" "$TOPO" "$SIMFLAGS" "$SETUP" <<'EOF'
import json, subprocess, sys
path, sim, topo, flags, setup = sys.argv[1:6]
doc = json.load(open(path))
print(f"| setup | size (B) | algorithm | chunk x channels | measured (us) | predicted (us) | error |")
print("|---|---:|---|---|---:|---:|---:|")

def simulate(size, algo):
    cmd = [sim, "--topo-file", topo, "-C", "allreduce", "-b", str(size), "-e", str(size)] + flags.split()
    if algo:
        cmd += ["-a", algo]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].isdigit():
            return f[3], f"{f[4]} x {f[5]}", float(f[6])
    return None, "-", None

for r in doc["rows"]:
    algo, meas = r.get("algo", ""), r["out_of_place"]["time_us"]
    got, chunk, pred = simulate(r["size"], None)
    if algo and got != algo:  # the selector disagrees: time what the sweep ran, unchunked
        got, chunk, pred = simulate(r["size"], algo)
        chunk += " (forced)"
    err = "-" if pred is None else f"{(pred - meas) / meas * 100:+.0f}%"
    ptxt = "-" if pred is None else f"{pred:.0f}"
    print(f"| {setup} | {r['size']} | {algo} | {chunk} | {meas:.0f} | {ptxt} | {err} |")
EOF
