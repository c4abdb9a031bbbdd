#!/usr/bin/env bash
# plot_compression.sh: the compression comparison's curves and table from the trainer's
# --loss-file outputs (one run per codec, same config and steps).
#   plot_compression.sh OUT.png NAME=LOSSFILE...     e.g. none=loss_none.txt int8=loss_int8.txt
# Draws validation loss (points) and a 20-step running mean of the training loss per run, and
# prints a markdown table: final validation loss and its difference from the first run's.
set -euo pipefail
png=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plot="set terminal png size 1400,620; set output '$png'; set grid; set xlabel 'step';"
plot+=" set ylabel 'loss (nats/byte)'; set yrange [1.8:3.3]; set key outside right top font ',9';"
plot+=" set title 'MoE trainer, default config, 2 ranks: gradient compression with error feedback'; plot"
sep=""
i=1
for run in "$@"; do
  name=${run%%=*} file=${run#*=}
  # running mean of the last 20 training losses
  awk '$1 == "train" { buf[n % 20] = $3; n++; s = 0; m = n < 20 ? n : 20;
                       for (i = 0; i < m; i++) s += buf[i]; print $2, s / m }' "$file" >"$work/$name.train"
  awk '$1 == "val" { print $2, $3 }' "$file" >"$work/$name.val"
  plot+="$sep '$work/$name.train' with lines lc $i dt 3 title '$name train (20-step mean)',"
  plot+=" '$work/$name.val' with linespoints lc $i lw 2 pt 7 title '$name validation'"
  sep=","
  i=$((i + 1))
done
gnuplot -e "$plot"
first=""
echo "| run | val loss at steps $(awk '$1 == "val" { printf "%s%s", sep, $2; sep = ", " }' "${1#*=}") | final val | vs ${1%%=*} |"
echo "| --- | --- | --- | --- |"
for run in "$@"; do
  name=${run%%=*} file=${run#*=}
  final=$(awk '$1 == "val" { v = $3 } END { printf "%.4f", v }' "$file")
  [ -z "$first" ] && first=$final
  curve=$(awk '$1 == "val" { printf "%s%.3f", sep, $3; sep = ", " }' "$file")
  echo "| $name | $curve | $final | $(awk -v a="$final" -v b="$first" 'BEGIN { printf "%+.2f%%", 100 * (a - b) / b }') |"
done
