#!/bin/bash
# perf/plot.sh — bus bandwidth vs message size (log x), one line per result file, as PNG.
#
#   plot.sh -o OUT.png [-t TITLE] [-p oop|ip] [-y busbw|time] FILE[=LABEL]...
#
# FILE is a --json or --csv file from weft-perf / gloo-perf / mpi-perf-* / nccl-perf; each
# becomes one line, labeled by LABEL or the file's backend (plus its algo column when every
# row names the same one). Sizes of 0 bytes are left out (log axis). Needs gnuplot.
set -euo pipefail

OUT="" TITLE="" PLACEMENT=oop METRIC=busbw
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "o:t:p:y:h" opt; do
  case "$opt" in
    o) OUT="$OPTARG" ;;
    t) TITLE="$OPTARG" ;;
    p) PLACEMENT="$OPTARG" ;;
    y) METRIC="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ -n "$OUT" ] && [ $# -gt 0 ] || usage
case "$PLACEMENT" in oop|ip) ;; *) echo "plot.sh: -p $PLACEMENT: oop or ip" >&2; exit 2 ;; esac
case "$METRIC" in busbw|time) ;; *) echo "plot.sh: -y $METRIC: busbw or time" >&2; exit 2 ;; esac
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not found" >&2; exit 1; }

TMP=$(mktemp -d /tmp/weft-plot.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# One .dat per input (size value) and a label file, by a small stdlib-only python step.
python3 - "$TMP" "$PLACEMENT" "$METRIC" "$@" <<'EOF'
import csv, json, os, sys
tmp, placement, metric, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
field = {"oop": "out_of_place", "ip": "in_place"}[placement]
col = {"busbw": "busbw", "time": "time_us"}[metric]
for i, spec in enumerate(specs):
    path, _, label = spec.partition("=")
    rows = []  # (size, value, algo)
    if path.endswith(".csv"):
        with open(path) as f:
            for r in csv.DictReader(f):
                v = r.get(f"{placement}_{col}", "")
                if v != "":
                    rows.append((int(r["size"]), float(v), r["algo"]))
                backend = r["backend"]
    else:
        with open(path) as f:
            d = json.load(f)
        backend = d["backend"]
        for r in d["rows"]:
            if r.get(field):
                rows.append((r["size"], r[field][col], r["algo"]))
    algos = {a for _, _, a in rows}
    if not label:
        label = backend
        if len(algos) == 1 and list(algos)[0] not in ("-", ""):
            label += " (" + list(algos)[0] + ")"
    with open(os.path.join(tmp, f"{i}.dat"), "w") as f:
        for s, v, _ in sorted(rows):
            if s > 0:
                f.write(f"{s} {v}\n")
    with open(os.path.join(tmp, f"{i}.label"), "w") as f:
        f.write(label.replace('"', "'"))
EOF

YLABEL="bus bandwidth (GB/s)"
LOGY=""
if [ "$METRIC" = time ]; then YLABEL="time (us)"; LOGY="set logscale y"; fi
{
  echo "set terminal pngcairo size 1000,600 font 'Sans,10' noenhanced"
  echo "set output '$OUT'"
  echo "set title \"${TITLE//\"/\'}\""
  echo "set logscale x 2"
  echo "$LOGY"
  echo "set format x '%.0b%B'"
  echo "set xlabel 'message size (bytes, nccl-tests convention)'"
  echo "set ylabel '$YLABEL ($PLACEMENT)'"
  echo "set grid"
  echo "set key top left"
  printf "plot "
  n=$#
  for ((i = 0; i < n; i++)); do
    label=$(cat "$TMP/$i.label")
    [ "$i" -gt 0 ] && printf ", "
    printf "'%s' using 1:2 with linespoints lw 2 title \"%s\"" "$TMP/$i.dat" "$label"
  done
  echo
} > "$TMP/plot.gp"
gnuplot "$TMP/plot.gp"
echo "plot.sh: wrote $OUT"
