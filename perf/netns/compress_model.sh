#!/bin/bash
# perf/netns/compress_model.sh — issue 39 item 2: the model's prediction of each compressed
# 64 MiB float32 allreduce against its measurement, on 2 namespace hosts x R ranks at 2 Gbit/s.
#
#   [CALIBRATE=median|once] compress_model.sh BIN_DIR [R=2] [ROUNDS=3] [OUT_DIR=/tmp/compress_model]
#
# Each round (1) calibrates the job's fabric (weft-topo --calibrate, the same launcher and
# ranks) into OUT_DIR/2xR.roundK.topo, (2) times weft-perf --compress CODEC for every codec and
# the plain call, codecs alternating. Then (3) it predicts each with `weft-topo --topo-file ...
# --explain allreduce 64M --compress CODEC` on OUT_DIR/2xR.median.topo, every measured field
# the median of the rounds' calibrations. The VM's memory bandwidth moves by up to 2x between
# phases of tens of seconds (a copy beyond the LLC calibrated at 10.2 GB/s in one minute and
# 18.9 in the next, the shm tier's CMA at 4.9 and 6.9), and one calibration takes a second and
# a half: the median describes the machine over the same minutes as the measured medians.
# CALIBRATE=once calibrates before the first round only (OUT_DIR/2xR.topo), as before.
# Prints a markdown table: codec, predicted ms, measured ms (rank 0's out-of-place time, min /
# median / max), predicted / measured median, and the range of each round's prediction (on its
# own calibration) over its measurement. Needs root (perf/netns/run.sh).
set -eu
[ $# -ge 1 ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" R="${2:-2}" ROUNDS="${3:-3}" OUT="${4:-/tmp/compress_model}"
MODE="${CALIBRATE:-median}"
case "$MODE" in median|once) ;; *) echo "CALIBRATE=$MODE: expected median or once" >&2; exit 2;; esac
HERE="$(cd "$(dirname "$0")" && pwd)"
NS=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate 2gbit --timeout 300 --)
CODECS=(none int8 fp8e4m3 int4 sign1 topk:0.01)
mkdir -p "$OUT"
calibrate() {  # $1: the topo file
  "${NS[@]}" "$B/weft-topo" --calibrate --save "$1" > "$OUT/calibration.txt" 2>&1
  grep -E 'cpu kernels|network' "$OUT/calibration.txt" | head -3 >&2
}
predict() {  # $1: topo file, $2: codec
  if [ "$2" = none ]; then  # the plain call the selector picks, timed at 64 MiB
    "$B/weft-topo" --topo-file "$1" --explain allreduce 64M --compress int8 2>&1 |
      grep -o 'vs plain [a-z_]* [0-9.]* us' | awk '{print $4}'
  else
    "$B/weft-topo" --topo-file "$1" --explain allreduce 64M --compress "$2" 2>&1 |
      grep -o 'simulated [a-z_]* [0-9.]* us' | awk '{print $3}'
  fi
}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), calibrate $MODE" >&2
: > "$OUT/pairs.txt"
TOPO="$OUT/2x$R.topo"
[ "$MODE" = once ] && calibrate "$TOPO"
for k in $(seq "$ROUNDS"); do
  if [ "$MODE" = median ]; then TOPO="$OUT/2x$R.round$k.topo"; calibrate "$TOPO"; fi
  for c in "${CODECS[@]}"; do
    args=(-C allreduce -b 64M -e 64M -n 3 -w 2 --values normal)  # calibration's value shape
    [ "$c" = none ] || args+=(--compress "$c")
    t=$("${NS[@]}" "$B/weft-perf" "${args[@]}" 2>&1 | grep -E '^\[0\] +67108864' | awk '{print $7}')
    echo "$c ${t:-nan} $(predict "$TOPO" "$c")" >> "$OUT/pairs.txt"
  done
done
echo "# end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ "$MODE" = median ]; then
  TOPO="$OUT/2x$R.median.topo"
  python3 - "$TOPO" "$OUT"/2x"$R".round*.topo <<'PY'
# Every key=value whose value is a number, the median over the files; the rest, the first's.
import statistics, sys
files = [open(f).read().splitlines() for f in sys.argv[2:]]
out = []
for lines in zip(*files):
    tokens = [l.split(" ") for l in lines]
    merged = []
    for toks in zip(*tokens):
        key, _, value = toks[0].partition("=")
        try:
            vals = [float(t.partition("=")[2]) for t in toks]
            if len(set(toks)) == 1:
                merged.append(toks[0])
            elif all(t.partition("=")[2].lstrip("-").isdigit() for t in toks):  # counts, bytes
                merged.append(f"{key}={int(statistics.median_low(vals))}")
            else:
                merged.append(f"{key}={statistics.median(vals):.9g}")
        except ValueError:
            merged.append(toks[0])
    out.append(" ".join(merged))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
fi
: > "$OUT/predicted.txt"
for c in "${CODECS[@]}"; do echo "$c $(predict "$TOPO" "$c")" >> "$OUT/predicted.txt"; done
python3 - "$OUT/pairs.txt" "$OUT/predicted.txt" <<'PY'
import statistics, sys
measured, ratios, predicted = {}, {}, {}
for line in open(sys.argv[1]):
    c, t, p = (line.split() + ["nan", "nan"])[:3]
    measured.setdefault(c, []).append(float(t) / 1e3)
    ratios.setdefault(c, []).append(float(p) / float(t))
for line in open(sys.argv[2]):
    c, p = (line.split() + ["nan"])[:2]
    predicted[c] = float(p) / 1e3
print("| codec | predicted (ms) | measured min / median / max (ms) | predicted / median | each round on its own calibration |")
print("|---|---:|---:|---:|---:|")
for c, v in measured.items():
    m, p = statistics.median(v), predicted[c]
    name = "uncompressed" if c == "none" else c
    print(f"| {name} | {p:.1f} | {min(v):.1f} / {m:.1f} / {max(v):.1f} | {p / m:.2f} | "
          f"{min(ratios[c]):.2f}-{max(ratios[c]):.2f} |")
PY
