#!/usr/bin/env bash
# Installs what weft needs on Debian 12 (when missing), configures and builds it.
# Idempotent: re-running only rebuilds what changed. Used by scripts/run.sh and scripts/test.sh.
#   BUILD_DIR (default: build)  CMAKE_ARGS (extra configure flags)  JOBS (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

PACKAGES=(build-essential cmake pkg-config python3 iproute2
          libgtest-dev libgmock-dev libbenchmark-dev libhwloc-dev hwloc libucx-dev libibverbs-dev librdmacm-dev
          libopenmpi-dev openmpi-bin libmpich-dev mpich libgloo-dev gnuplot-nox
          libopenblas-dev fortunes python3-venv clang libclang-rt-14-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; fi
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
