#!/bin/bash
# perf/netns/moe_dispatch.sh — issue 39's MoE goal on the namespace harness: the token
# dispatch all-to-all(v) (perf/moe_dispatch_bench.cc: 4096 tokens x 2048 hidden per rank, top-2
# of 64 experts, skewed popularity, so uneven counts) with fp8 tokens against bf16 tokens and
# float32, on 2 hosts x R ranks at 2 Gbit/s. Every bench run alternates the modes round by
# round; RUNS runs, each preceded by the machine's load. Needs root (exit 77 otherwise).
#
#   moe_dispatch.sh BIN_DIR [R=2] [RUNS=2] [ROUNDS=3] [bench options...]
# Prints each run's table (rank 0); the goal row is fp8's vs_bf16 (<= 0.6).
set -u
[ $# -ge 1 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" R="${2:-2}" RUNS="${3:-2}" ROUNDS="${4:-3}"
shift $(( $# < 4 ? $# : 4 ))
HERE="$(cd "$(dirname "$0")" && pwd)"
# Pieces of the pipelined compressed all-to-all(v): weft's rule (unset: auto) or
# WEFT_COMPRESSION_CHUNK_BYTES as given; 0 = one piece (not pipelined). (The figures of
# wave 3 session 5 ran with 4, 64 pieces per block, around a bug this session fixed: ranks
# cut blocks by the part of the count table each held.)
rc=0
for k in $(seq "$RUNS"); do
  echo "== run $k $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" \
       "WEFT_COMPRESSION_CHUNK_BYTES=${WEFT_COMPRESSION_CHUNK_BYTES:-auto}"
  bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate 2gbit --timeout 600 -- \
    "$B/moe_dispatch_bench" --ranks-per-host "$R" --rate-gbit 2 --rounds "$ROUNDS" "$@" 2>&1 |
    grep '^\[0\]' | sed 's/^\[0\] //'
  st=${PIPESTATUS[0]}
  [ "$st" = 0 ] || { echo "run $k: exit $st"; rc=$st; }
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
