#!/bin/bash
# perf/netns/run.sh — "several hosts" on one machine: K network namespaces joined by a bridge,
# each host's link shaped with tc tbf, R ranks per host.
#
#   run.sh --hosts K --ranks-per-host R --rate RATE [--keep-going] [--burst BYTES]
#          [--port P] [--timeout SEC] -- PROGRAM ARGS...
#
# Layout (every name carries the prefix weftns<PID>, so concurrent runs never collide):
#   namespace weftns<PID>-br    bridge br0 with one port per host (bh<i>)
#   namespace weftns<PID>-h<i>  veth wh<i> = 10.213.0.<i+1>/24, the host's only interface
# The host's own interfaces and addresses are never touched. Each host's link is shaped in
# both directions with tbf (uplink: egress of wh<i>; downlink: egress of bridge port bh<i>),
# since netem is not available; --burst overrides the burst computed from the rate.
#
# Rank r = i*R + l runs as `ip netns exec weftns<PID>-h<i> PROGRAM ARGS` with WEFT_RANK,
# WEFT_WORLD_SIZE, WEFT_LOCAL_RANK, WEFT_LOCAL_SIZE, WEFT_ROOT (10.213.0.1:P), WEFT_SECRET
# (32 random hex digits, shared) and WEFT_SOCKET_IFNAME (wh<i>). Ranks of one namespace share
# /dev/shm (weft uses shm there); across namespaces they reach each other only through TCP.
# Output lines are prefixed "[rank] ". The first rank to fail makes the others be killed
# (--keep-going: let them finish); the exit code is the first non-zero one, 124 on --timeout.
# Everything (ranks, namespaces, links) is removed on exit, error, Ctrl-C or TERM.
# Exit 77 (skip) when not root or when namespaces, veths, bridges or tbf cannot be used.
set -u

usage() {
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

HOSTS="" RPH="" RATE="" KEEP_GOING=0 BURST="" PORT=29500 TIMEOUT=900
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) HOSTS="$2"; shift 2 ;;
    --ranks-per-host) RPH="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --burst) BURST="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    --keep-going) KEEP_GOING=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) echo "run.sh: unknown option '$1'" >&2; usage ;;
  esac
done
[ -n "$HOSTS" ] && [ -n "$RPH" ] && [ -n "$RATE" ] && [ $# -gt 0 ] || usage
case "$HOSTS$RPH" in *[!0-9]*) echo "run.sh: --hosts '$HOSTS' and --ranks-per-host '$RPH' must be integers" >&2; exit 2 ;; esac
if [ "$HOSTS" -lt 1 ] || [ "$HOSTS" -gt 250 ] || [ "$RPH" -lt 1 ]; then
  echo "run.sh: --hosts $HOSTS must be in [1, 250] and --ranks-per-host $RPH >= 1" >&2
  exit 2
fi

skip() { echo "run.sh: SKIP: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces (uid $(id -u))"
command -v ip >/dev/null || skip "ip (iproute2) not found"
command -v tc >/dev/null || skip "tc (iproute2) not found"

# Rate in bit/s from tc's syntax (2gbit, 500mbit, 100kbit, 1000000bit, 10gbps, 125mbps).
rate_bits() {
  local v="${1,,}" n unit
  n="${v%%[a-z]*}"; unit="${v#"$n"}"
  case "$unit" in
    ""|bit) echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    bps) echo $((n * 8)) ;;
    kbps) echo $((n * 8000)) ;;
    mbps) echo $((n * 8000000)) ;;
    gbps) echo $((n * 8000000000)) ;;
    *) return 1 ;;
  esac
}
RATE_BITS=$(rate_bits "$RATE") || { echo "run.sh: --rate '$RATE': use tc units (e.g. 2gbit, 500mbit)" >&2; exit 2; }
if [ -z "$BURST" ]; then
  # The token bucket refills on timer ticks and veth hands it GSO packets of up to 64 KiB:
  # a burst of ~4 ms of traffic (at least 128 KiB) holds the configured rate within a few %
  # (measured: perf/netns/measure_rate.py; see perf/RESULTS.md).
  BURST=$((RATE_BITS / 8 / 250))
  [ "$BURST" -lt 131072 ] && BURST=131072
fi

PREFIX="weftns$$"
BR="$PREFIX-br"
NS=()
for ((i = 0; i < HOSTS; i++)); do NS+=("$PREFIX-h$i"); done
declare -A RANK_PID=()   # pid (= process group) -> rank
CLEANED=0
WATCHDOG=""

cleanup() {
  [ "$CLEANED" = 1 ] && return
  CLEANED=1
  local pid
  [ -n "$WATCHDOG" ] && kill -TERM -- "-$WATCHDOG" 2>/dev/null
  for pid in "${!RANK_PID[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
  for ns in "${NS[@]}" "$BR"; do
    # anything still running inside our namespaces was started by this script
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  for pid in "${!RANK_PID[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; done
  for ns in "${NS[@]}" "$BR"; do ip netns del "$ns" 2>/dev/null; done
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted, cleaning up" >&2; exit 130' INT
trap 'echo "run.sh: terminated, cleaning up" >&2; exit 143' TERM
trap 'echo "run.sh: --timeout $TIMEOUT s reached, cleaning up" >&2; exit 124' USR1

fail_setup() { echo "run.sh: SKIP: $1 failed: $2" >&2; exit 77; }
try() { # try DESCRIPTION CMD... : run, or skip with the command's own error
  local what="$1" err
  shift
  err=$("$@" 2>&1) || fail_setup "$what" "$err"
}

try "ip netns add $BR" ip netns add "$BR"
try "bridge" ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
ip -n "$BR" link set lo up
for ((i = 0; i < HOSTS; i++)); do
  ns="${NS[$i]}"
  try "ip netns add $ns" ip netns add "$ns"
  ip -n "$ns" link set lo up
  try "veth wh$i<->bh$i" ip -n "$ns" link add "wh$i" type veth peer name "bh$i" netns "$BR"
  ip -n "$BR" link set "bh$i" master br0
  ip -n "$BR" link set "bh$i" up
  ip -n "$ns" addr add "10.213.0.$((i + 1))/24" dev "wh$i"
  ip -n "$ns" link set "wh$i" up
  try "tc tbf on wh$i" ip netns exec "$ns" tc qdisc add dev "wh$i" root tbf \
    rate "$RATE" burst "$BURST" latency 100ms
  try "tc tbf on bh$i" ip netns exec "$BR" tc qdisc add dev "bh$i" root tbf \
    rate "$RATE" burst "$BURST" latency 100ms
done

NRANKS=$((HOSTS * RPH))
SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
ROOT="10.213.0.1:$PORT"
echo "run.sh: $HOSTS hosts x $RPH ranks, link $RATE (tbf burst $BURST B) each way," \
  "root $ROOT, namespaces $PREFIX-*" >&2

# Each rank in its own process group (job control), so one kill stops it and its children.
set -m
for ((i = 0; i < HOSTS; i++)); do
  for ((l = 0; l < RPH; l++)); do
    r=$((i * RPH + l))
    (
      trap - EXIT INT TERM USR1
      ip netns exec "${NS[$i]}" env WEFT_RANK=$r WEFT_WORLD_SIZE=$NRANKS WEFT_LOCAL_RANK=$l \
        WEFT_LOCAL_SIZE=$RPH WEFT_ROOT="$ROOT" WEFT_SECRET="$SECRET" \
        WEFT_SOCKET_IFNAME="wh$i" "$@" 2>&1 | sed -u "s/^/[$r] /"
      exit "${PIPESTATUS[0]}"
    ) &
    RANK_PID[$!]=$r
  done
done
set +m

# A watchdog ends the run (code 124) if it outlives --timeout, so a wedged rank never leaks
# namespaces past a harness's own timeout.
# Its own process group too, so killing it also ends its sleep (which holds our stdout open).
set -m
(sleep "$TIMEOUT"; kill -USR1 $$) &
WATCHDOG=$!
set +m

RC=0
KILLED=0
# Poll rather than `wait -n`: bash's wait -n forgets jobs that were already reaped (killed
# process groups), which would spin forever. `wait PID` still returns a reaped child's code.
while [ "${#RANK_PID[@]}" -gt 0 ]; do
  for pid in "${!RANK_PID[@]}"; do
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    code=$?
    r=${RANK_PID[$pid]}
    unset "RANK_PID[$pid]"
    [ "$code" = 0 ] && continue
    echo "run.sh: rank $r exited with code $code" >&2
    [ "$RC" = 0 ] && RC=$code
    if [ "$KEEP_GOING" = 0 ] && [ "$KILLED" = 0 ] && [ "${#RANK_PID[@]}" -gt 0 ]; then
      KILLED=1
      echo "run.sh: killing the other ${#RANK_PID[@]} rank(s)" >&2
      for p in "${!RANK_PID[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
    fi
  done
  sleep 0.1
done
exit "$RC"
