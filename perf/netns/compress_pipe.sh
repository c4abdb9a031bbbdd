#!/bin/bash
# perf/netns/compress_pipe.sh — issue 39's figures: 64 MiB float32 allreduce on 2 namespace
# hosts x R ranks at 2 Gbit/s, every codec (--compress, the pipelined schedules) beside weft
# uncompressed, Gloo, the job-wide path (WEFT_COMPRESSION=int8 with error feedback, the
# selector deciding), int8 unpipelined (WEFT_COMPRESSION_CHUNK_BYTES=0), int8, fp8 and top-k
# without codec chains (WEFT_FUSE_CODEC_STEPS=0: the steps one by one), sign1 and int4 with the
# received lane stored before its chain runs (WEFT_STREAM_RECV_CHAINS=0); optionally the
# same two int8 rows from a second build (BASE_BIN: the commit before). Modes alternate within
# each of ROUNDS rounds, because the VM has fast and slow phases. Needs root. RATE (default
# 2gbit) sets the links' rate: RATE=100gbit leaves the CPU's share (the floor of the compute).
# Every row times gradient-like values (weft-perf --values normal; VALUES=exact: the check's
# small integers, as before 2026-12-05, which flatter top-k). Two warmup calls: weft folds a
# reused single-copy source into huge pages on its second use (src/common/huge_pages.h), so the
# timed calls see the buffers as a training loop's reused buckets do. PAGES=huge gives every row
# (Gloo's too) buffers on huge pages from the start (weft-perf --pages).
#
#   [RATE=2gbit] [VALUES=normal] [PAGES=small] compress_pipe.sh BIN_DIR [R=2] [ROUNDS=2] [BASE_BIN]
# Prints per mode rank 0's out-of-place / in-place time (us), the algorithm and the wire bytes.
set -u
[ $# -ge 1 ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
B="$1" R="${2:-2}" ROUNDS="${3:-2}" BASE="${4:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"
NS=(bash "$HERE/run.sh" --hosts 2 --ranks-per-host "$R" --rate "${RATE:-2gbit}" --timeout 300 --)
P=(-C allreduce -b 64M -e 64M -n 3 -w 2 --values "${VALUES:-normal}" --pages "${PAGES:-small}")
row() { grep -E '^\[0\] +67108864' | awk '{printf "%8d %8d  %s %s\n", $7, $11, $(NF-1), $NF}'; }
run() {  # label, env assignments..., -- program args...
  local label="$1"; shift
  printf '%-22s' "$label"
  env "$@" 2>&1 | row
}
for k in $(seq "$ROUNDS"); do
  echo "== round $k $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  run "weft uncompressed" -- "${NS[@]}" "$B/weft-perf" "${P[@]}"
  [ -x "$B/gloo-perf" ] && run "gloo" -- "${NS[@]}" "$B/gloo-perf" "${P[@]}"
  for c in int8 fp8e4m3 int4 sign1 topk:0.01; do
    run "$c" -- "${NS[@]}" "$B/weft-perf" "${P[@]}" --compress "$c"
  done
  run "int8 unpipelined" WEFT_COMPRESSION_CHUNK_BYTES=0 "${NS[@]}" "$B/weft-perf" "${P[@]}" --compress int8
  run "int8 step by step" WEFT_FUSE_CODEC_STEPS=0 "${NS[@]}" "$B/weft-perf" "${P[@]}" --compress int8
  run "fp8 step by step" WEFT_FUSE_CODEC_STEPS=0 "${NS[@]}" "$B/weft-perf" "${P[@]}" --compress fp8e4m3
  run "topk step by step" WEFT_FUSE_CODEC_STEPS=0 "${NS[@]}" "$B/weft-perf" "${P[@]}" --compress topk:0.01
  run "sign1 unstreamed" WEFT_STREAM_RECV_CHAINS=0 "${NS[@]}" "$B/weft-perf" "${P[@]}" --compress sign1
  run "int4 unstreamed" WEFT_STREAM_RECV_CHAINS=0 "${NS[@]}" "$B/weft-perf" "${P[@]}" --compress int4
  run "WEFT_COMPRESSION=int8" WEFT_COMPRESSION=int8 "${NS[@]}" "$B/weft-perf" "${P[@]}"
  if [ -n "$BASE" ]; then
    run "base int8" -- "${NS[@]}" "$BASE/weft-perf" "${P[@]}" --compress int8
    run "base WEFT_COMPRESSION" WEFT_COMPRESSION=int8 "${NS[@]}" "$BASE/weft-perf" "${P[@]}"
  fi
done
echo "== end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
