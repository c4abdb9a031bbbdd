#!/usr/bin/env bash
# Runs the whole test suite (installs and builds first). Exit status = ctest's.
#   scripts/setup.sh         Debian packages, configure, build (C++ library, tools, tests)
#   scripts/setup_python.sh  the venv (.venv) with torch and weft's PyTorch backend
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
export BUILD_DIR
./scripts/setup.sh
if [ -x scripts/setup_python.sh ]; then ./scripts/setup_python.sh; fi
# Two at a time: many tests run several ranks, and this machine class has 2 cores.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${TEST_JOBS:-2}" --timeout 600 "$@"
