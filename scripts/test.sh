#!/usr/bin/env bash
# Runs the whole test suite (installs and builds first). Exit status = ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/setup.sh
# Two at a time: many tests run several ranks, and this machine class has 2 cores.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600 "$@"
