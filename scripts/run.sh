#!/usr/bin/env bash
# The main job: 4 local ranks, an nccl-tests-style sweep of allreduce, allgather and
# reduce-scatter (installs and builds first). Extra arguments go to weft-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
RANKS=${RANKS:-4}
./scripts/setup.sh
for coll in allreduce allgather reducescatter; do
  echo "# ---- $coll, $RANKS ranks ----"
  "$BUILD_DIR/bin/weftrun" -n "$RANKS" "$BUILD_DIR/bin/weft-perf" -C "$coll" -b 8 -e 64M -f 4 -c 1 "$@"
done
