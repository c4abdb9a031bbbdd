#!/bin/bash
# perf/netns/ab_builds.sh — one compressed 64 MiB float32 allreduce from two builds on 2
# namespace hosts x R ranks at 2 Gbit/s, the builds alternating round by round (the VM has fast
# and slow phases lasting tens of seconds, so a build's rounds must interleave with the other's).
# Prints per round and build rank 0's out-of-place and in-place times (us), then each build's
# min / median / max over all of them. Needs root. VALUES (exact or normal) passes --values to
# both builds; builds from before 2026-12-05 have no --values and time exact integers, so
# compare them with VALUES=exact (newer builds time gradient-like values under --compress).
#
#   [RATE=2gbit] [VALUES=] ab_builds.sh NEW_BIN BASE_BIN [CODEC=topk:0.01] [R=2] [ROUNDS=6] [N=10]
set -u
[ $# -ge 2 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
NEW="$1" BASE="$2" CODEC="${3:-topk:0.01}" R="${4:-2}" ROUNDS="${5:-6}" N="${6:-10}"
HERE="$(cd "$(dirname "$0")" && pwd)"
NS=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate "${RATE:-2gbit}" --timeout 300 --)
V=(); [ -n "${VALUES:-}" ] && V=(--values "$VALUES")
OUT=$(mktemp /tmp/weft_ab.XXXXXX)
trap 'rm -f "$OUT"' EXIT
for k in $(seq "$ROUNDS"); do
  for b in new base; do
    B="$NEW"; [ "$b" = base ] && B="$BASE"
    t=$("${NS[@]}" "$B/weft-perf" -C allreduce -b 64M -e 64M -n "$N" -w 2 --compress "$CODEC" ${V[@]+"${V[@]}"} 2>&1 |
        grep -E '^\[0\] +67108864' | awk '{print $7, $11}')
    echo "round $k $b ${t:-failed}"
    for v in $t; do echo "$b $v" >> "$OUT"; done
  done
done
for b in new base; do
  awk -v b="$b" '$1 == b {print $2}' "$OUT" | sort -n |
    awk -v b="$b" '{v[NR] = $1} END {if (NR) printf "%-4s min %.1f median %.1f max %.1f ms (%d samples)\n", b, v[1] / 1e3, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) / 1e3, v[NR] / 1e3, NR}'
done
