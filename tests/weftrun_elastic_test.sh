#!/usr/bin/env bash
# weftrun_elastic_test.sh: weftrun's --elastic and --replace rules, with shell ranks.
#
#   weftrun_elastic_test.sh BIN_DIR
#
# --elastic: a rank killed by a signal is reported and the others finish (exit 0); a rank that
#            exits non-zero still stops the job with its status; every rank killed: 128 + signal.
# --replace: the killed rank's slot gets a new process with WEFTRUN_JOIN_SLOT=<rank> and the
#            job's WEFTRUN_JOIN_DIR (which every rank sees, and which is removed at the end).
# (moe_trainer.elastic runs the trainer itself under both.)
set -euo pipefail
weftrun=$1/weftrun
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $1"; cat "$out"; exit 1; }

# Rank 1 kills itself; the others outlive it by a second and report.
rc=0
timeout 60 "$weftrun" --elastic -n 3 sh -c \
  'if [ "$WEFT_RANK" = 1 ]; then kill -9 $$; fi; sleep 1; echo "survived $WEFT_RANK"' >"$out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "--elastic with one rank killed: exit $rc, expected 0"
grep -q "survived 0" "$out" && grep -q "survived 2" "$out" || fail "--elastic: survivors did not finish"
grep -q "rank 1 was killed by signal 9 (Killed); --elastic: the other ranks continue" "$out" ||
  fail "--elastic: the loss is not reported"
echo "--elastic, one rank killed: the others finish, exit 0 ok"

# An error exit is still an error: the job stops (well before the others' 60 s sleep).
rc=0
start=$(date +%s)
timeout 60 "$weftrun" --elastic -n 3 sh -c \
  'if [ "$WEFT_RANK" = 1 ]; then exit 3; fi; sleep 50' >"$out" 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "--elastic with a rank exiting 3: exit $rc, expected 3"
[ $(($(date +%s) - start)) -lt 30 ] || fail "--elastic: the others were not stopped"
echo "--elastic, a rank exits 3: the job stops with 3 ok"

# Nobody survives: the signal's status.
rc=0
timeout 60 "$weftrun" --elastic -n 2 sh -c 'kill -9 $$' >"$out" 2>&1 || rc=$?
[ "$rc" = 137 ] || fail "--elastic with every rank killed: exit $rc, expected 137"
echo "--elastic, every rank killed: exit 137 ok"

# --replace: the replacement knows its slot and the join directory; the directory goes away.
rc=0
timeout 60 "$weftrun" --replace -n 3 sh -c '
  echo "rank $WEFT_RANK dir $WEFTRUN_JOIN_DIR"
  if [ -n "${WEFTRUN_JOIN_SLOT:-}" ]; then echo "replacement for $WEFTRUN_JOIN_SLOT"; exit 0; fi
  if [ "$WEFT_RANK" = 2 ]; then kill -9 $$; fi
  sleep 1' >"$out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "--replace: exit $rc, expected 0"
grep -q "replacement for 2" "$out" || fail "--replace: no replacement with WEFTRUN_JOIN_SLOT=2"
grep -q "started a replacement for rank 2" "$out" || fail "--replace: not reported"
dirs=$(grep -o "dir [^ ]*" "$out" | sort -u)
[ "$(echo "$dirs" | wc -l)" = 1 ] && [ "$dirs" != "dir " ] || fail "--replace: ranks saw different join dirs: $dirs"
[ ! -e "${dirs#dir }" ] || fail "--replace: ${dirs#dir } left behind"
echo "--replace: the slot's replacement ran with WEFTRUN_JOIN_SLOT and the job's dir ok"
