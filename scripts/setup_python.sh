#!/usr/bin/env bash
# Creates the Python environment for the PyTorch backend and installs it: .venv at the
# repository root (system python3), torch (PyPI's default wheel), numpy, pytest, ninja, and a
# setuptools that builds wheels (the package's PEP 517 build runs without isolation), then
# bindings/torch built against the already built library in $BUILD_DIR (scripts/setup.sh).
# Idempotent and quick when nothing changed: pip runs only for missing packages, and the
# binding is rebuilt only when its sources or weft's public headers changed.
#   BUILD_DIR (default: build)   VENV (default: .venv)   PIP_ARGS (extra pip flags)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BUILD_DIR=$(cd "${BUILD_DIR:-build}" 2>/dev/null && pwd) || {
  echo "setup_python: build directory ${BUILD_DIR:-build} is missing; run scripts/setup.sh first" >&2
  exit 1; }
VENV=${VENV:-$REPO/.venv}
PY_SYSTEM=/usr/bin/python3
[ -x "$PY_SYSTEM" ] || PY_SYSTEM=$(command -v python3)

if [ ! -f "$BUILD_DIR/libweft.so" ]; then
  echo "setup_python: $BUILD_DIR/libweft.so is missing; run scripts/setup.sh first" >&2
  exit 1
fi

# python3-venv (ensurepip) is a separate Debian package.
if ! "$PY_SYSTEM" -c 'import ensurepip, venv' 2>/dev/null; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "setup_python: need root or sudo to install python3-venv" >&2; exit 1; fi
  fi
  echo "setup_python: installing python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_python: creating $VENV"
  "$PY_SYSTEM" -m venv "$VENV"
fi
PY="$VENV/bin/python"

# Third-party packages: one pip call for whatever is missing.
# One interpreter start (importing torch takes seconds), printing the missing names.
# The package's PEP 517 build (no isolation) needs setuptools' bdist_wheel: built in from
# setuptools 70.1, from the wheel package before.
read -r -a missing <<< "$("$PY" -c '
import importlib.util as u
need = [p for p in ("torch", "numpy", "pytest", "ninja") if u.find_spec(p) is None]
try:
    import setuptools
    version = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
except Exception:
    version = (0, 0)
if version < (70, 1) and u.find_spec("wheel") is None:
    need.append("setuptools>=70.1")
print(" ".join(need))')"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_python: pip install ${missing[*]}"
  "$PY" -m pip install -q ${PIP_ARGS:-} "${missing[@]}"
fi

# The binding: rebuilt when one of its sources, weft's public headers or the build directory
# changed (it links libweft.so dynamically through an rpath, so a rebuilt library is picked up
# without rebuilding the binding).
stamp_file="$VENV/.weft_torch.stamp"
stamp=$( { echo "$BUILD_DIR"
           find bindings/torch/setup.py bindings/torch/pyproject.toml bindings/torch/csrc \
                bindings/torch/weft_torch \
                include/weft -type f \( -name '*.py' -o -name '*.toml' -o -name '*.cc' -o -name '*.h' \) \
                -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ] && \
   "$PY" -c 'import importlib.util as u; assert u.find_spec("weft_torch._C")' 2>/dev/null; then
  echo "setup_python: weft_torch is up to date"
  exit 0
fi
echo "setup_python: building bindings/torch against $BUILD_DIR"
rm -f "$stamp_file"
WEFT_BUILD_DIR="$BUILD_DIR" MAX_JOBS=${JOBS:-$(nproc)} \
  "$PY" -m pip install -q --no-build-isolation --no-deps ${PIP_ARGS:-} ./bindings/torch
"$PY" -c 'import weft_torch'
echo "$stamp" > "$stamp_file"
echo "setup_python: weft_torch installed"
