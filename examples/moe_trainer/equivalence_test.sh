#!/usr/bin/env bash
# equivalence_test.sh: trains the tiny config in two layouts and compares the per-step losses.
#
#   equivalence_test.sh MODE BIN_DIR
#
# MODE   what runs                                                        check
# dp     DP=2 and DP=4 vs 1 rank, same global batch, both routers          rel. diff <= 1e-5
# ep     EP=2 (2 ranks) vs DP=2 (2 ranks, no EP), capacity dropping on    bitwise
#        EP=2 x DP=2 (4 ranks) vs DP=4                                     rel. diff <= 1e-5
# zero   ZeRO-1 vs plain DP on 2 ranks, and on EP=2 x DP=2                rel. diff <= 1e-5
#        (measured: bitwise on 2 ranks; ~1e-8 on EP=2 x DP=2, where the clip norm is summed
#        from shards in another order); ZeRO-1 on DP=3 (buckets of 512 or 8 x 16 floats cut
#        into uneven shards, weftReduceScatterV / weftAllGatherV), alone and   rel. diff <= 1e-5
#        with --balance measured and a slow rank, vs 1 rank (measured: ~4e-7)
# resume 20 steps straight vs 10 steps + checkpoint + resume for 10        bitwise (both routers)
# compress --compress int8 / fp8 / 1bit on 2 ranks (and int8 with ZeRO-1, fp8 EP dispatch on
#        EP=2 and EP=4: its dispatch travels fp8, its combine bf16, per the traffic report
#        and weft's metrics):
#        losses finite and decreasing, every rank's parameters identical   digests equal
#        after the last step; resume with compression (residuals saved)    bitwise
# onebit --onebit-adam --compress-after 10 on 2 ranks: steps 0-9 are the   bitwise
#        plain run's; steps 10-19 differ from it and from 1-bit gradient
#        compression; replicas identical; resume (momenta, frozen variance,
#        residuals) bitwise; with a near-exact codec (fp16) the 2-rank       rel. diff <= 1e-4
#        momentum all-reduce gives the 1-rank frozen-variance run's losses
#        (catches a wrong momentum share); EP=2 (experts local)             dense digests equal
# layouts TP=2, PP=2, TPxPP, DPxTP, DPxPPxEP, DPxTPxPP (2-8 ranks; data  rel. diff <= 1e-5
#        parallel = ranks / (TP x PP)), and DP x PP with ZeRO-1, vs 1 rank;
#        DP x TP with int8 gradients: decreasing, replicas identical;       digests equal
#        TP x PP resume at step 10                                         bitwise
#        --sequence-parallel on TP=2, TP=4, TP x PP, DP x TP x PP with      rel. diff <= 1e-5
#        ZeRO-1, EP x TP: vs 1 rank and vs the same layout without it
#        (measured: ~7e-9 vs 1 rank; not bitwise, the sums go in another order)
#        --balance measured, rank 1 slowed 3x, vs 1 rank; shares moved       rel. diff <= 1e-5
# threads 1 rank, default config, 2 steps: --threads 2 vs --threads 1     bitwise (Prescott
#        kernels), 1e-6 with the kernels moe_train picks
# elastic --elastic, DP=4 and DP=4 with ZeRO-1, rank 2 killed at the start of step 30 of 40
#        (--kill-rank): weftrun --elastic succeeds, the 3 survivors recover (printing the
#        time) and hold identical parameters; steps 0-29 are the undisturbed 4-rank run's   bitwise
#        and steps 30-39 those of a 3-rank run resumed from that run's step-30 checkpoint  rel. diff <= 1e-6
#        (the same state on 3 ranks), whose final parameters the survivors' equal          digests equal
#        ZeRO-1 with ranks 1 and 2 killed at step 35 (rank 1's shard and its mirror both
#        gone): the survivors reload the step-30 checkpoint on 2 ranks, say so, and
#        steps 30-39 are those of a 2-rank run resumed from it                          rel. diff <= 1e-6
#        ZeRO-1 with rank 2 killed at step 0 (no mirror yet) vs 3 ranks from the start  rel. diff <= 1e-6
#        weftrun --replace, DP=4 and DP=4 with ZeRO-1, rank 2 killed at step 30: a new process
#        joins by grow and receives the state; steps 0-39 and the 4 ranks' final parameters
#        are the undisturbed 4-rank run's (each rank again holds the same share of the batch) bitwise
# bad    bad configurations fail with a message naming the argument       exit 1 + message
#        (sizes out of range, negative counts), and a diverged run (--lr 1e6) stops naming
#        the step
#
# Losses are written with 17 significant digits, so "bitwise" compares exact float values.
set -euo pipefail
mode=$1
bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
COMMON=(--config tiny --steps 20 --threads 1 --quiet --val-every 0 --data "${MOE_DATA:-/usr/share/games/fortunes}")
export WEFT_TIMEOUT=60

train() {  # ranks output-file extra-args...
  local n=$1 out=$2
  shift 2
  if [ "$n" = 1 ]; then
    "$bin/moe_train" "${COMMON[@]}" --loss-file "$out" "$@"
  else
    "$bin/weftrun" -n "$n" --timeout 120 "$bin/moe_train" "${COMMON[@]}" --loss-file "$out" "$@"
  fi
}

compare() {  # reference candidate rtol label   (rtol 0 = identical values)
  awk -v rtol="$3" -v label="$4" '
    FNR == NR { if ($1 == "train") ref[$2] = $3; next }
    $1 == "train" {
      n++
      if (!($2 in ref)) { print label ": step " $2 " missing from the reference"; bad = 1; next }
      d = $3 - ref[$2]; if (d < 0) d = -d
      a = ref[$2] < 0 ? -ref[$2] : ref[$2]
      r = d / a; if (r > max) max = r
      if (rtol == 0 ? ($3 != ref[$2]) : (r > rtol)) {
        print label ": step " $2 " loss " $3 " vs " ref[$2] " (rel " r ")"; bad = 1
      }
    }
    END {
      if (n != length(ref)) { print label ": " n " steps vs " length(ref) " in the reference"; bad = 1 }
      printf "%s: %d steps, max relative difference %.3g (limit %s) %s\n", label, n, max,
             rtol == 0 ? "bitwise" : rtol, bad ? "FAIL" : "ok"
      exit bad
    }' "$1" "$2"
}

# Losses all finite, and the mean of the last 5 steps below the mean of the first 5 by >= 5%.
decreasing() {  # loss-file label
  awk -v label="$2" '
    $1 == "train" { n++; loss[n] = $3; if ($3 != $3 + 0 || $3 ~ /nan|inf/) bad = 1 }
    END {
      if (n < 10) { print label ": only " n " steps"; exit 1 }
      for (i = 1; i <= 5; i++) { first += loss[i] / 5; last += loss[n - 5 + i] / 5 }
      ok = !bad && last < 0.95 * first
      printf "%s: %d steps, loss %.4f -> %.4f (first/last 5 steps) %s\n", label, n, first, last,
             bad ? "NOT FINITE" : (ok ? "ok" : "NOT DECREASING")
      exit !ok
    }' "$1"
}

# Every rank printed the same parameter digest (replicas identical, bit for bit).
same_digest() {  # output-file label ranks
  local lines distinct
  lines=$(grep -c "params digest rank" "$1" || true)
  distinct=$(grep "params digest rank" "$1" | sed 's/.*rank [0-9]*: //' | sort -u | wc -l)
  if [ "$lines" != "$3" ] || [ "$distinct" != 1 ]; then
    echo "$2: ranks' parameters differ (or digests missing):"; grep "params digest" "$1"; return 1
  fi
  echo "$2: $3 ranks hold identical parameters ok"
}

# --compress-dispatch fp8: each rank's traffic report (--digest) shows the forward dispatch in
# fp8 (wire about 1/4 of float32 plus one scale per block), the forward combine in bf16 (wire
# exactly half) and the backward exchanges in float32; and weft's own record of its calls
# (WEFT_METRICS_FILE) holds the dispatches and combines as compressed all-to-allv and exactly
# the backward ones as plain float32 all-to-allv.
fp8_dispatch_bf16_combine() {  # output-file metrics-prefix ranks
  local r plain packed
  for r in $(seq 0 $(($3 - 1))); do
    plain=$(grep '"collective":"alltoallv","bytes":[0-9]*,"dtype":"float32"' "$2.$r" |
            grep -vc '"algorithm":"compressed"' || true)
    packed=$(grep '"collective":"alltoallv","bytes":[0-9]*,"dtype":"float32"' "$2.$r" |
             grep -c '"algorithm":"compressed"' || true)
    grep "expert exchange rank $r:" "$1" | awk -v plain="$plain" -v packed="$packed" -v r="$r" '
      { for (i = 1; i <= NF; i++) if ($i == "calls") {
          kind = $(i - 2); codec[kind] = $(i - 1); calls[kind] = $(i + 1)
          f32[kind] = $(i + 3); wire[kind] = $(i + 5) } }
      END {
        ok = codec["dispatch"] == "fp8e4m3" && calls["dispatch"] > 0 &&
             wire["dispatch"] < 0.3 * f32["dispatch"] &&
             codec["combine"] == "bf16" && calls["combine"] > 0 && 2 * wire["combine"] == f32["combine"] &&
             codec["backward"] == "float32" && wire["backward"] == f32["backward"] &&
             calls["backward"] == plain && calls["dispatch"] + calls["combine"] == packed
        printf "rank %d: dispatch %s %d -> %d bytes, combine %s %d -> %d, backward %s x%d; " \
               "weft recorded %d compressed and %d plain float32 all-to-allv: %s\n", r,
               codec["dispatch"], f32["dispatch"], wire["dispatch"], codec["combine"],
               f32["combine"], wire["combine"], codec["backward"], calls["backward"], packed,
               plain, ok ? "fp8 dispatch + bf16 combine ok" : "NOT the fp8 dispatch / bf16 combine"
        exit !ok
      }' || return 1
  done
}

# The train lines of steps [first, last] (a step redone after a recovery: its last value).
steps() {  # loss-file first last
  awk -v a="$2" -v b="$3" '$1 == "train" && $2 >= a && $2 <= b { v[$2] = $0 }
    END { for (s = a; s <= b; s++) if (s in v) print v[s] }' "$1"
}

# One elastic scenario: the killed run, the undisturbed run to the checkpoint, and the run
# resumed from it on the survivors' number of ranks. Extra args go to every run.
elastic_case() {  # label kill-ranks kill-step resume-step survivors extra-args...
  local label=$1 kill=$2 at=$3 from=$4 left=$5
  shift 5
  local e=(--steps 40 --elastic --digest --checkpoint-every 10)
  rm -rf "$work/ck_el" "$work/ck_ref"
  "$bin/weftrun" --elastic -n 4 --timeout 200 "$bin/moe_train" "${COMMON[@]}" "${e[@]}" "$@" \
    --kill-rank "$kill" --kill-step "$at" --checkpoint-dir "$work/ck_el" --loss-file "$work/el" \
    >"$work/el.out" 2>&1 || { echo "$label: the elastic run failed"; grep -v "seq=" "$work/el.out"; return 1; }
  same_digest "$work/el.out" "$label: survivors" "$left"
  local recovered
  recovered=$(grep -c "elastic: recovered in" "$work/el.out" || true)
  [ "$recovered" = "$left" ] || { echo "$label: $recovered ranks printed a recovery time"; return 1; }
  grep "elastic: recovered in" "$work/el.out" | head -1
  grep -q "^elastic $at $from $left\$" "$work/el" ||
    { echo "$label: no 'elastic $at $from $left' line in the loss file"; return 1; }
  "$bin/weftrun" -n 4 --timeout 120 "$bin/moe_train" "${COMMON[@]}" "${e[@]}" "$@" \
    --stop-after "$from" --checkpoint-dir "$work/ck_ref" --loss-file "$work/before" >/dev/null
  "$bin/weftrun" -n "$left" --timeout 120 "$bin/moe_train" "${COMMON[@]}" "${e[@]}" "$@" \
    --resume --checkpoint-dir "$work/ck_ref" --loss-file "$work/after" >"$work/after.out"
  steps "$work/el" 0 $((from - 1)) >"$work/el_before"
  steps "$work/el" "$from" 39 >"$work/el_after"
  compare "$work/before" "$work/el_before" 0 "$label: steps 0-$((from - 1)) vs undisturbed 4 ranks"
  compare "$work/after" "$work/el_after" 1e-6 "$label: steps $from-39 vs $left ranks resumed at $from"
  local mine theirs
  mine=$(grep -m1 "params digest" "$work/el.out" | sed 's/.*rank [0-9]*: //')
  theirs=$(grep -m1 "params digest" "$work/after.out" | sed 's/.*rank [0-9]*: //')
  [ "$mine" = "$theirs" ] || { echo "$label: final parameters $mine vs resumed run's $theirs"; return 1; }
  echo "$label: final parameters equal the resumed $left-rank run's ok"
}

# weftrun --replace: the killed rank's replacement joins; the job ends as if undisturbed.
replace_case() {  # label extra-args...
  local label=$1
  shift
  local e=(--steps 40 --elastic --digest)
  "$bin/weftrun" --replace -n 4 --timeout 200 "$bin/moe_train" "${COMMON[@]}" "${e[@]}" "$@" \
    --kill-rank 2 --kill-step 30 --loss-file "$work/rep" >"$work/rep.out" 2>&1 ||
    { echo "$label: the run failed"; grep -v "seq=" "$work/rep.out"; return 1; }
  grep -q "joined the job as a replacement at step 30" "$work/rep.out" ||
    { echo "$label: no replacement joined"; grep -v "seq=" "$work/rep.out"; return 1; }
  grep -q "^elastic 30 30 4\$" "$work/rep" || { echo "$label: no 'elastic 30 30 4' line"; return 1; }
  same_digest "$work/rep.out" "$label" 4
  "$bin/weftrun" -n 4 --timeout 120 "$bin/moe_train" "${COMMON[@]}" "${e[@]}" "$@" \
    --loss-file "$work/undisturbed" >"$work/undisturbed.out"
  steps "$work/rep" 0 39 >"$work/rep_steps"
  compare "$work/undisturbed" "$work/rep_steps" 0 "$label: steps 0-39 vs undisturbed"
  local mine theirs
  mine=$(grep -m1 "params digest" "$work/rep.out" | sed 's/.*rank [0-9]*: //')
  theirs=$(grep -m1 "params digest" "$work/undisturbed.out" | sed 's/.*rank [0-9]*: //')
  [ "$mine" = "$theirs" ] || { echo "$label: final parameters $mine vs undisturbed $theirs"; return 1; }
  echo "$label: final parameters equal the undisturbed run's ok"
}

expect_error() {  # label expected-text args...
  local label=$1 text=$2
  shift 2
  if "$bin/moe_train" "$@" >"$work/out" 2>&1; then
    echo "$label: expected a failure, got success"; return 1
  fi
  if ! grep -q -- "$text" "$work/out"; then
    echo "$label: message lacks '$text':"; cat "$work/out"; return 1
  fi
  echo "$label: ok ($(head -c 160 "$work/out" | tr '\n' ' '))"
}

case "$mode" in
  dp)
    for router in softmax sigmoid; do
      train 1 "$work/dp1" --router "$router"
      train 2 "$work/dp2" --router "$router"
      train 4 "$work/dp4" --router "$router"
      compare "$work/dp1" "$work/dp2" 1e-5 "DP=2 vs DP=1 ($router)"
      compare "$work/dp1" "$work/dp4" 1e-5 "DP=4 vs DP=1 ($router)"
    done
    ;;
  ep)
    for router in softmax sigmoid; do
      train 2 "$work/dp2" --router "$router" --capacity-factor 1.25
      train 2 "$work/ep2" --router "$router" --capacity-factor 1.25 --ep 2
      compare "$work/dp2" "$work/ep2" 0 "EP=2 vs DP=2 ($router)"
    done
    train 4 "$work/dp4"
    train 4 "$work/ep2dp2" --ep 2
    # Not bitwise: DP=4 sums an expert's 4 gradient parts in the all-reduce's order, EP=2 x DP=2
    # adds two parts on the expert's rank and then all-reduces over 2 ranks.
    compare "$work/dp4" "$work/ep2dp2" 1e-5 "EP=2 x DP=2 vs DP=4"
    ;;
  zero)
    train 2 "$work/dp2"
    train 2 "$work/zero2" --zero1
    compare "$work/dp2" "$work/zero2" 1e-5 "ZeRO-1 vs DP (2 ranks)"
    train 4 "$work/ep2dp2" --ep 2
    train 4 "$work/ep2dp2zero" --ep 2 --zero1
    compare "$work/ep2dp2" "$work/ep2dp2zero" 1e-5 "ZeRO-1 vs DP (EP=2 x DP=2)"
    # Uneven shards: no bucket of the tiny model divides into 3 equal 16-float-aligned shards
    # (the embedding's 512 units give 171 + 171 + 170), so every reduce-scatter and gather is
    # uneven; the batch (12) divides by 3.
    train 1 "$work/one12" --batch 12
    train 3 "$work/zero3" --batch 12 --zero1
    compare "$work/one12" "$work/zero3" 1e-5 "ZeRO-1 on DP=3 (uneven shards) vs 1 rank"
    train 3 "$work/zero3b" --batch 12 --zero1 --balance measured --balance-every 5 --slow-rank 1:3
    compare "$work/one12" "$work/zero3b" 1e-5 "ZeRO-1 on DP=3, --balance measured --slow-rank 1:3, vs 1 rank"
    ;;
  resume)
    for router in softmax sigmoid; do
      train 2 "$work/straight" --router "$router" --ep 2
      train 2 "$work/resumed" --router "$router" --ep 2 --checkpoint-dir "$work/ckpt" --stop-after 10
      train 2 "$work/resumed" --router "$router" --ep 2 --checkpoint-dir "$work/ckpt" --resume
      compare "$work/straight" "$work/resumed" 0 "resume at step 10 ($router, EP=2)"
    done
    train 2 "$work/zstraight" --zero1
    train 2 "$work/zresumed" --zero1 --checkpoint-dir "$work/zckpt" --stop-after 10
    train 2 "$work/zresumed" --zero1 --checkpoint-dir "$work/zckpt" --resume
    compare "$work/zstraight" "$work/zresumed" 0 "resume at step 10 (ZeRO-1)"
    ;;
  compress)
    for codec in int8 fp8 1bit; do
      train 2 "$work/$codec" --compress "$codec" --digest >"$work/$codec.out"
      decreasing "$work/$codec" "--compress $codec (2 ranks)"
      same_digest "$work/$codec.out" "--compress $codec" 2
    done
    # ZeRO-1: reduce-scatter compressed, parameters all-gathered exactly.
    train 2 "$work/zero" --compress int8 --zero1 --digest >"$work/zero.out"
    decreasing "$work/zero" "--compress int8 --zero1"
    same_digest "$work/zero.out" "--compress int8 --zero1" 2
    # EP with fp8 token dispatch (and compressed dense gradients): the 2 ranks hold different
    # experts, so only the dense digests must match.
    WEFT_METRICS_FILE="$work/ep.metrics.%r" \
      train 2 "$work/ep" --ep 2 --compress-dispatch fp8 --compress int8 --digest >"$work/ep.out"
    decreasing "$work/ep" "--ep 2 --compress-dispatch fp8 --compress int8"
    fp8_dispatch_bf16_combine "$work/ep.out" "$work/ep.metrics" 2
    sed -i 's/ experts [0-9a-f]*$//' "$work/ep.out"
    same_digest "$work/ep.out" "--ep 2 --compress-dispatch fp8 (dense parameters)" 2
    # EP=4: the compressed all-to-all(v) among 4 ranks with uneven counts, both ways.
    WEFT_METRICS_FILE="$work/ep4.metrics.%r" \
      train 4 "$work/ep4" --ep 4 --compress-dispatch fp8 --digest >"$work/ep4.out"
    decreasing "$work/ep4" "--ep 4 --compress-dispatch fp8"
    fp8_dispatch_bf16_combine "$work/ep4.out" "$work/ep4.metrics" 4
    sed -i 's/ experts [0-9a-f]*$//' "$work/ep4.out"
    same_digest "$work/ep4.out" "--ep 4 --compress-dispatch fp8 (dense parameters)" 4
    # The residuals are part of the checkpoint, so a resumed compressed run is the straight one.
    train 2 "$work/straight" --compress 1bit
    train 2 "$work/resumed" --compress 1bit --checkpoint-dir "$work/ckpt" --stop-after 10
    train 2 "$work/resumed" --compress 1bit --checkpoint-dir "$work/ckpt" --resume
    compare "$work/straight" "$work/resumed" 0 "resume at step 10 (--compress 1bit)"
    # --compress-after 10: the first 10 steps are the uncompressed run's, bit for bit.
    train 2 "$work/plain" --steps 20
    train 2 "$work/after" --compress 1bit --compress-after 10
    head -10 "$work/plain" >"$work/plain10"
    head -10 "$work/after" >"$work/after10"
    compare "$work/plain10" "$work/after10" 0 "--compress-after 10: steps 0-9 uncompressed"
    if cmp -s "$work/plain" "$work/after"; then echo "--compress-after 10: steps 10-19 not compressed"; exit 1; fi
    ;;
  onebit)
    O=(--onebit-adam --compress-after 10)
    train 2 "$work/plain" --digest >"$work/plain.out"
    train 2 "$work/adam1" "${O[@]}" --digest >"$work/adam1.out"
    decreasing "$work/adam1" "--onebit-adam (2 ranks)"
    same_digest "$work/adam1.out" "--onebit-adam" 2
    head -10 "$work/plain" >"$work/plain10"
    head -10 "$work/adam1" >"$work/adam110"
    compare "$work/plain10" "$work/adam110" 0 "--onebit-adam: warm-up steps 0-9 uncompressed AdamW"
    train 2 "$work/gradbit" --compress 1bit --compress-after 10
    for other in plain gradbit; do
      if cmp -s <(tail -10 "$work/$other") <(tail -10 "$work/adam1"); then
        echo "--onebit-adam: steps 10-19 equal the $other run's (frozen-variance stage not taken)"; exit 1
      fi
    done
    echo "--onebit-adam: steps 10-19 differ from plain AdamW and from 1-bit gradients: ok"
    # Momentum shares: with fp16 (error <= 2^-11 relative) the 2-rank all-reduce of
    # beta1*m/2 + (1-beta1)*g_r must rebuild the 1-rank momentum; a wrong share (m not
    # divided by the group) doubles it: measured 1.4e-2 off at the first compressed step.
    train 1 "$work/one" "${O[@]}"
    train 2 "$work/fp16" "${O[@]}" --compress fp16
    compare "$work/one" "$work/fp16" 1e-4 "--onebit-adam --compress fp16, 2 ranks vs 1 rank"
    train 2 "$work/resumed" "${O[@]}" --checkpoint-dir "$work/ckpt" --stop-after 15
    train 2 "$work/resumed" "${O[@]}" --checkpoint-dir "$work/ckpt" --resume
    compare "$work/adam1" "$work/resumed" 0 "--onebit-adam: resume at step 15"
    train 2 "$work/ep" "${O[@]}" --ep 2 --digest >"$work/ep.out"
    decreasing "$work/ep" "--onebit-adam --ep 2"
    sed -i 's/ experts [0-9a-f]*$//' "$work/ep.out"
    same_digest "$work/ep.out" "--onebit-adam --ep 2 (dense parameters)" 2
    ;;
  threads)
    # The default config: its products are big enough to be split over threads (the tiny
    # one's are not). Slices keep OpenBLAS on the same kernels (blas.cc), so bitwise.
    # Bitwise needs kernels that sum a row the same way whatever the slice: OpenBLAS's generic
    # Prescott kernels do (pinned here); its Haswell/Zen/SkylakeX ones (what moe_train picks
    # by default where the CPU has them, blas.h) change low bits (measured 2.4e-8 relative on
    # Zen), so with the machine's own kernel the check is 1e-6.
    D=(--config default --steps 2 --warmup 1 --val-every 0 --quiet --data "${MOE_DATA:-/usr/share/games/fortunes}")
    OPENBLAS_CORETYPE=Prescott "$bin/moe_train" "${D[@]}" --threads 1 --loss-file "$work/t1"
    OPENBLAS_CORETYPE=Prescott "$bin/moe_train" "${D[@]}" --threads 2 --loss-file "$work/t2"
    compare "$work/t1" "$work/t2" 0 "--threads 2 vs --threads 1 (default config, Prescott kernels)"
    "$bin/moe_train" "${D[@]}" --threads 1 --loss-file "$work/n1"
    "$bin/moe_train" "${D[@]}" --threads 2 --loss-file "$work/n2"
    compare "$work/n1" "$work/n2" 1e-6 "--threads 2 vs --threads 1 (default config, default kernels)"
    ;;
  layouts)
    # Tensor, pipeline, expert and data parallelism in every combination the issue names:
    # the same model, data and update as one rank, so the same losses up to summation order.
    train 1 "$work/one"
    for layout in "2 --tp 2" "2 --pp 2" "4 --tp 2 --pp 2" "4 --tp 2" "8 --pp 2 --ep 2" \
                  "8 --tp 2 --pp 2" "4 --pp 2 --zero1"; do
      read -r -a args <<<"$layout"
      train "${args[0]}" "$work/layout" "${args[@]:1}"
      compare "$work/one" "$work/layout" 1e-5 "ranks ${args[0]}: ${args[*]:1} vs 1 rank"
    done
    # Sequence parallelism: the same update, the norms and residuals on 1/T of the tokens.
    for layout in "2 --tp 2" "4 --tp 4" "4 --tp 2 --pp 2" "8 --tp 2 --pp 2 --zero1" "4 --tp 2 --ep 2"; do
      read -r -a args <<<"$layout"
      train "${args[0]}" "$work/plain_tp" "${args[@]:1}"
      train "${args[0]}" "$work/sp" "${args[@]:1}" --sequence-parallel
      compare "$work/one" "$work/sp" 1e-5 "ranks ${args[0]}: ${args[*]:1} --sequence-parallel vs 1 rank"
      compare "$work/plain_tp" "$work/sp" 1e-5 "ranks ${args[0]}: ${args[*]:1} --sequence-parallel vs without"
    done
    # Uneven ranks: rank 1 three times slower, shares re-measured every 5 steps; the update is
    # the even split's, so the losses are one rank's; the shares must have moved off 4 + 4.
    train 2 "$work/balance" --balance measured --balance-every 5 --slow-rank 1:3
    compare "$work/one" "$work/balance" 1e-5 "ranks 2: --balance measured --slow-rank 1:3 vs 1 rank"
    grep -E "^balance [0-9]+ ([5-7] [1-3])$" "$work/balance" | head -1 | grep -q . ||
      { echo "--balance measured: the slow rank's share did not shrink:"; grep balance "$work/balance"; exit 1; }
    echo "--balance measured: shares $(grep ^balance "$work/balance" | tail -1 | cut -d' ' -f3-) ok"
    # Compression on the data-parallel dimension of DP=2 x TP=2: the two replicas of each
    # tensor-parallel part (ranks 0 and 2, 1 and 3) end bitwise equal.
    train 4 "$work/tpc" --tp 2 --compress int8 --digest >"$work/tpc.out"
    decreasing "$work/tpc" "--tp 2 --compress int8 (4 ranks)"
    for pair in "0 2" "1 3"; do
      read -r a b <<<"$pair"
      grep -E "digest rank ($a|$b):" "$work/tpc.out" | sed 's/.*rank [0-9]*: //' | sort -u | wc -l |
        grep -qx 1 || { echo "--tp 2 --compress int8: ranks $a and $b differ"; cat "$work/tpc.out"; exit 1; }
    done
    echo "--tp 2 --compress int8: data-parallel replicas identical ok"
    # Checkpoint and resume of a TP x PP layout (each rank its own part).
    train 4 "$work/straight" --tp 2 --pp 2
    train 4 "$work/resumed" --tp 2 --pp 2 --checkpoint-dir "$work/ckpt" --stop-after 10
    train 4 "$work/resumed" --tp 2 --pp 2 --checkpoint-dir "$work/ckpt" --resume
    compare "$work/straight" "$work/resumed" 0 "resume at step 10 (TP=2 x PP=2)"
    ;;
  elastic)
    elastic_case "DP=4, rank 2 lost" 2 30 30 3
    elastic_case "DP=4 ZeRO-1, rank 2 lost" 2 30 30 3 --zero1
    elastic_case "DP=4 ZeRO-1, ranks 1,2 lost" 1,2 35 30 2 --zero1
    grep -q "had no living copy: reloaded the checkpoint of step 30" "$work/el.out" ||
      { echo "ranks 1,2 lost: the log does not say the checkpoint was reloaded"; exit 1; }
    echo "ranks 1,2 lost: the log names the checkpoint reload ok"
    # A loss in the first step, before any mirror exists: ZeRO-1's moments are still zero there.
    "$bin/weftrun" --elastic -n 4 --timeout 200 "$bin/moe_train" "${COMMON[@]}" --steps 40 --elastic \
      --zero1 --kill-rank 2 --kill-step 0 --loss-file "$work/first" >"$work/first.out" 2>&1 ||
      { echo "step-0 loss: the run failed"; grep -v "seq=" "$work/first.out"; exit 1; }
    "$bin/weftrun" -n 3 --timeout 120 "$bin/moe_train" "${COMMON[@]}" --steps 40 --elastic --zero1 \
      --loss-file "$work/three"
    steps "$work/first" 0 39 >"$work/first_steps"
    compare "$work/three" "$work/first_steps" 1e-6 "DP=4 ZeRO-1, rank 2 lost in step 0, vs 3 ranks"
    replace_case "weftrun --replace, DP=4"
    replace_case "weftrun --replace, DP=4 ZeRO-1" --zero1
    ;;
  bad)
    expect_error "elastic with compression" "--elastic supports data parallelism only" "${T[@]}" --elastic --compress int8
    expect_error "kill rank range" "--kill-rank 5 --kill-step 3: both are needed" "${T[@]}" --kill-rank 5 --kill-step 3
    T=(--config tiny --steps 1 --warmup 0 --quiet)
    expect_error "experts % ep" "is not divisible by --ep" "${T[@]}" --experts 6 --ep 4
    expect_error "top-k > experts" "--top-k 9 must be between 1 and --experts 8" "${T[@]}" --top-k 9
    expect_error "dim % heads" "must be a multiple of --heads" "${T[@]}" --dim 30 --heads 4
    expect_error "unknown router" "--router: 'relu'" "${T[@]}" --router relu
    expect_error "not a number" "--lr: 'fast' is not a number" "${T[@]}" --lr fast
    expect_error "unknown option" "unknown option '--bogus'" "${T[@]}" --bogus 1
    expect_error "unknown codec" "--compress 'int9' is not a compression spec" "${T[@]}" --compress int9
    expect_error "bad codec option" "--compress 'int8:block=0'" "${T[@]}" --compress int8:block=0
    expect_error "dispatch codec" "--compress-dispatch '1bit': sign1" "${T[@]}" --ep 1 --compress-dispatch 1bit
    expect_error "compress-after alone" "--compress-after 5 must be >= 0 and needs --compress" "${T[@]}" --compress-after 5
    expect_error "onebit without warm-up" "--onebit-adam needs --compress-after N >= 1" "${T[@]}" --onebit-adam
    expect_error "onebit with zero1" "--onebit-adam with --zero1" "${T[@]}" --onebit-adam --compress-after 5 --zero1
    expect_error "dispatch without EP" "--compress-dispatch 'fp8' needs --ep >= 2" "${T[@]}" --compress-dispatch fp8
    expect_error "missing data" "cannot open the fortunes directory" "${T[@]}" --data /nonexistent
    expect_error "resume without dir" "--resume needs --checkpoint-dir" "${T[@]}" --resume
    expect_error "threads too many" "--threads 100000 must be between 0" "${T[@]}" --threads 100000
    expect_error "dim out of int" "--dim: '99999999999' is out of range" "${T[@]}" --dim 99999999999
    expect_error "model too big" "--dim 2000000000, --layers 2" "${T[@]}" --dim 2000000000 --heads 1
    expect_error "negative stop-after" "--stop-after -1 must be >= 0" "${T[@]}" --stop-after -1
    expect_error "negative grad-clip" "--grad-clip -1.000000 must be >= 0" "${T[@]}" --grad-clip -1
    expect_error "negative step-timeout" "--step-timeout -2.000000 must be >= 0" "${T[@]}" --step-timeout -2
    expect_error "infinite lr" "--lr: 'inf' is not a finite" "${T[@]}" --lr inf
    # A diverged run stops with an error naming the step instead of training on NaN.
    expect_error "diverged" "step [0-9]*: the loss is" --config tiny --steps 6 --warmup 0 --quiet --lr 1e6 --grad-clip 0
    # Under weftrun every rank reports the same configuration error; ep must divide the ranks.
    if "$bin/weftrun" -n 2 "$bin/moe_train" "${T[@]}" --ep 4 >"$work/out" 2>&1; then
      echo "ep > ranks: expected a failure"; exit 1
    fi
    grep -q -- "--ep 4 must divide the number of ranks 2" "$work/out" || { cat "$work/out"; exit 1; }
    echo "ep > ranks under weftrun: ok"
    # Layouts: TP must divide the heads, PP the layers, TP x PP the ranks (every rank says so).
    expect_error "tp vs heads" "--tp 3 must divide --heads 4" "${T[@]}" --tp 3
    expect_error "pp vs layers" "--pp 3 must divide --layers 2" "${T[@]}" --pp 3
    expect_error "tp vs shared" "--tp 32 must divide the shared experts' hidden width 16" "${T[@]}" --tp 32 --heads 32 --dim 64
    expect_error "micro-batches" "--micro-batches 3 must divide the 8 sequences" "${T[@]}" --micro-batches 3
    expect_error "negative tp" "--tp -1 must be >= 1" "${T[@]}" --tp -1
    expect_error "sequence parallel without tp" "--sequence-parallel needs --tp >= 2" "${T[@]}" --sequence-parallel
    expect_error "sequence parallel vs seq-len" "--sequence-parallel needs --tp >= 2 dividing --seq-len 30" "${T[@]}" --sequence-parallel --tp 4 --seq-len 30
    expect_error "balance kind" "--balance 'fast' is not even or measured" "${T[@]}" --balance fast
    expect_error "balance with micro-batches" "--balance measured needs --tp 1, --pp 1" "${T[@]}" --balance measured --micro-batches 2
    expect_error "slow rank" "--slow-rank 3:2.000000: the rank must be in" "${T[@]}" --slow-rank 3:2
    expect_error "slow rank syntax" "--slow-rank: '2' is not RANK:FACTOR" "${T[@]}" --slow-rank 2
    if "$bin/weftrun" -n 2 "$bin/moe_train" "${T[@]}" --tp 2 --pp 2 >"$work/out" 2>&1; then
      echo "tp x pp > ranks: expected a failure"; exit 1
    fi
    # Every rank validates before any work, but weftrun stops the others when the first exits,
    # so one message is all the output is sure to hold.
    grep -q -- "moe_train: error: --tp 2 x --pp 2 must divide the number of ranks 2" "$work/out" ||
      { cat "$work/out"; exit 1; }
    echo "tp x pp > ranks under weftrun: ok"
    ;;
  *)
    echo "unknown mode $mode"; exit 2 ;;
esac
