#!/bin/bash
# perf/netns/compress_model.sh — issue 39 item 2: the model's prediction of each compressed
# 64 MiB float32 allreduce against its measurement, on 2 namespace hosts x R ranks at 2 Gbit/s.
#
#   compress_model.sh BIN_DIR [R=2] [ROUNDS=3] [OUT_DIR=/tmp/compress_model]
#
# (1) calibrates the job's fabric (weft-topo --calibrate, the same launcher and ranks) into
# OUT_DIR/2xR.topo; (2) ROUNDS rounds of weft-perf --compress CODEC for every codec and of the
# plain call, codecs alternating within a round (the VM has fast and slow phases); (3) the
# predictions of `weft-topo --topo-file 2xR.topo --explain allreduce 64M --compress CODEC`.
# Prints a markdown table: codec, predicted ms, measured ms (rank 0's out-of-place time, min /
# median / max over the rounds), predicted / median. Needs root (perf/netns/run.sh).
set -eu
[ $# -ge 1 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" R="${2:-2}" ROUNDS="${3:-3}" OUT="${4:-/tmp/compress_model}"
HERE="$(cd "$(dirname "$0")" && pwd)"
NS=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate 2gbit --timeout 300 --)
CODECS=(none int8 fp8e4m3 int4 sign1 topk:0.01)
mkdir -p "$OUT"
TOPO="$OUT/2x$R.topo"
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${NS[@]}" "$B/weft-topo" --calibrate --save "$TOPO" > "$OUT/calibration.txt" 2>&1
grep -E 'cpu kernels|network' "$OUT/calibration.txt" | head -3 >&2
: > "$OUT/measured.txt"
for k in $(seq "$ROUNDS"); do
  for c in "${CODECS[@]}"; do
    args=(-C allreduce -b 64M -e 64M -n 3 -w 1 --values normal)  # calibration's value shape
    [ "$c" = none ] || args+=(--compress "$c")
    t=$("${NS[@]}" "$B/weft-perf" "${args[@]}" 2>&1 | grep -E '^\[0\] +67108864' | awk '{print $7}')
    echo "$c ${t:-nan}" >> "$OUT/measured.txt"
  done
done
echo "# end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
: > "$OUT/predicted.txt"
for c in "${CODECS[@]}"; do
  if [ "$c" = none ]; then  # the plain call the selector picks, timed at 64 MiB
    p=$("$B/weft-topo" --topo-file "$TOPO" --explain allreduce 64M --compress int8 2>&1 |
        grep -o 'vs plain [a-z_]* [0-9.]* us' | awk '{print $4}')
  else
    p=$("$B/weft-topo" --topo-file "$TOPO" --explain allreduce 64M --compress "$c" 2>&1 |
        grep -o 'simulated [a-z_]* [0-9.]* us' | awk '{print $3}')
  fi
  echo "$c ${p:-nan}" >> "$OUT/predicted.txt"
done
python3 - "$OUT/measured.txt" "$OUT/predicted.txt" <<'PY'
import statistics, sys
measured, predicted = {}, {}
for line in open(sys.argv[1]):
    c, t = line.split()
    measured.setdefault(c, []).append(float(t) / 1e3)
for line in open(sys.argv[2]):
    c, t = line.split()
    predicted[c] = float(t) / 1e3
print("| codec | predicted (ms) | measured min / median / max (ms) | predicted / median |")
print("|---|---:|---:|---:|")
for c, v in measured.items():
    m = statistics.median(v)
    name = "uncompressed" if c == "none" else c
    print(f"| {name} | {predicted[c]:.1f} | {min(v):.1f} / {m:.1f} / {max(v):.1f} | {predicted[c] / m:.2f} |")
PY
