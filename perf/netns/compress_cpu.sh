#!/bin/bash
# perf/netns/compress_cpu.sh — the CPU a compressed 64 MiB float32 allreduce costs on 2
# namespace hosts x R ranks at 2 Gbit/s: every codec run with -n 5 and -n 45 (80 more calls,
# out of place and in place), each rank under /usr/bin/time; the difference over 80 is each
# rank's user + system CPU time per call (the call's time: weft-perf's, rank 0 out of place).
# With every rank on one machine of C cores, (sum of the ranks' CPU) / C is the call's compute
# floor on it: no schedule of this work finishes sooner, however it overlaps the wire (the
# CPU counted includes waiting, so for a call that waits it overstates the floor). Beside it,
# the model's figure (weft-topo --explain on TOPO, when given: "cores busy ... per rank").
# Needs root.
#
#   [CODECS="int8 sign1"] compress_cpu.sh BIN_DIR [R=2] [TOPO]
set -u
[ $# -ge 1 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" R="${2:-2}" TOPO="${3:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"
CORES=$(nproc)
WRAP=$(mktemp /tmp/weft_cpu_wrap.XXXXXX.sh)
trap 'rm -f "$WRAP"' EXIT
printf '#!/bin/bash\nexec /usr/bin/time -f "cpu %%U %%S" "$@"\n' > "$WRAP"
chmod +x "$WRAP"
# Sum of the ranks' user and system seconds of one run of N calls, and rank 0's time (us).
totals() {
  bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate 2gbit --timeout 300 -- "$WRAP" \
    "$B/weft-perf" -C allreduce -b 64M -e 64M -n "$2" -w 2 --compress "$1" 2>&1 |
    awk '$2 == "cpu" { u += $3; s += $4 } $1 == "[0]" && $2 == 67108864 { t = $7 } END { print u, s, t }'
}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $CORES cores, 2 x $R ranks"
echo "| codec | call (ms) | CPU per rank per call (ms): user + sys | compute floor on $CORES cores (ms) | model: cores busy per rank (ms) |"
echo "|---|---:|---:|---:|---:|"
for c in ${CODECS:-int8 fp8e4m3 int4 sign1 topk:0.01}; do
  read -r u5 s5 t5 < <(totals "$c" 5)
  read -r u45 s45 t45 < <(totals "$c" 45)
  model=""
  if [ -n "$TOPO" ]; then
    model=$("$B/weft-topo" --topo-file "$TOPO" --explain allreduce 64M --compress "$c" 2>&1 |
            grep -o 'cores busy [0-9]* us' | awk '{printf "%.1f", $3 / 1e3}')
  fi
  awk -v c="$c" -v u="$u5" -v s="$s5" -v U="$u45" -v S="$s45" -v t="$t45" -v n="$((2 * R))" -v k="$CORES" -v m="$model" \
    'BEGIN { user = (U - u) / 80 * 1e3; sys = (S - s) / 80 * 1e3; cpu = user + sys
           printf "| %s | %.1f | %.1f = %.1f + %.1f | %.1f | %s |\n", c, t / 1e3, cpu / n, user / n, sys / n, cpu / k, m }'
done
echo "# end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
