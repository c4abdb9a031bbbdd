#!/usr/bin/env bash
# Builds the weft torch.distributed backend (bindings/torch) on the lent GPU machine against
# the carried bundle (tests/gpu/bundle.sh: $BUNDLE/libweft.so.0 and the CUDA device plugin) and
# the repository's include/, with the machine's own torch, into a temporary folder; prints the
# build time and the environment to use, and writes it to $WEFT_TORCH_BUILD/env.sh:
#   BUNDLE=.gpu-bundle tests/gpu/torch_build.sh && . /tmp/weft-torch-cuda/env.sh &&
#     python3 tests/gpu/torch_backend_cuda.py
# Exits non-zero, saying what is missing, when the machine lacks g++, Python's headers, torch or
# the bundle, and when no environment runs a one-rank weft group in torch's process (below). The extension compiles against c10's generic device interfaces only (no CUDA
# headers, no nvcc), so it needs no CUDA toolkit. MAX_JOBS=16; under 120 s on 16 cores.
#   BUNDLE (default .gpu-bundle)  WEFT_TORCH_BUILD (default /tmp/weft-torch-cuda)  PYTHON
#   JOBS (default 16: parallel compiles)
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)
BUNDLE=$(realpath "${BUNDLE:-.gpu-bundle}" 2>/dev/null || echo "${BUNDLE:-.gpu-bundle}")
DEST=${WEFT_TORCH_BUILD:-/tmp/weft-torch-cuda}
JOBS=${JOBS:-16}
export JOBS
PY=${PYTHON:-$(command -v python3 || command -v python)}

missing=()
[ -n "$PY" ] || missing+=("python3")
command -v g++ >/dev/null || command -v c++ >/dev/null || missing+=("g++ (a C++17 compiler)")
[ -f "$BUNDLE/libweft.so.0" ] || missing+=("$BUNDLE/libweft.so.0 (make it with tests/gpu/bundle.sh; set BUNDLE)")
[ -f "$REPO/include/weft/weft.h" ] || missing+=("$REPO/include/weft/weft.h")
if [ -n "$PY" ]; then
  "$PY" - <<'EOF' || missing+=("a Python with torch, setuptools and its C headers (see above)")
import sys, sysconfig, os
problems = []
try:
    import torch, torch.utils.cpp_extension  # noqa: F401
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), Python {sys.version.split()[0]}")
except Exception as err:
    problems.append(f"torch not importable: {err}")
try:
    import setuptools  # noqa: F401
except Exception as err:
    problems.append(f"setuptools not importable: {err}")
include = sysconfig.get_paths()["include"]
if not os.path.exists(os.path.join(include, "Python.h")):
    problems.append(f"Python.h missing in {include} (install python3-dev)")
for p in problems:
    print("torch_build.sh: " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
fi
if [ ${#missing[@]} -gt 0 ]; then
  for m in "${missing[@]}"; do echo "torch_build.sh: missing: $m" >&2; done
  exit 1
fi

rm -rf "$DEST"
mkdir -p "$DEST/lib" "$DEST/src"
# setup.py links -lweft from WEFT_BUILD_DIR and records it as the rpath; the loader then looks
# for the soname libweft.so.0 there, and weft looks for its device plugins beside libweft.
ln -s "$BUNDLE/libweft.so.0" "$DEST/lib/libweft.so"
ln -s "$BUNDLE/libweft.so.0" "$DEST/lib/libweft.so.0"
for plugin in "$BUNDLE"/libweft-device-*.so; do
  [ -e "$plugin" ] && ln -s "$plugin" "$DEST/lib/$(basename "$plugin")"
done
# A copy of the package's sources: the build writes build/ and egg-info beside setup.py, and
# the carried tree should stay as it came.
cp -r bindings/torch/setup.py bindings/torch/pyproject.toml bindings/torch/csrc \
      bindings/torch/weft_torch "$DEST/src/"
start=$SECONDS
# torch's BuildExtension compiles in parallel only through ninja; without it, compile the
# sources in parallel with the flags torch's extension builder would give (same pybind11 ABI
# defines, C++ standard and libstdc++ ABI), then link.
export PATH=$(dirname "$PY"):$PATH
if command -v ninja >/dev/null && [ -z "${WEFT_TORCH_NO_NINJA:-}" ]; then
  build_cmd=(env WEFT_BUILD_DIR="$DEST/lib" MAX_JOBS=$JOBS "$PY" setup.py build_ext --inplace
             -I "$REPO/include")
else
  echo "torch_build.sh: no ninja: compiling with $PY's torch flags, $JOBS g++ in parallel"
  build_cmd=("$PY" - "$DEST/lib" "$REPO/include")
fi
if ! (cd "$DEST/src" && timeout 300 "${build_cmd[@]}" <<'EOF') > "$DEST/build.log" 2>&1; then
import concurrent.futures, glob, inspect, os, re, subprocess, sys, sysconfig
import torch, torch.utils.cpp_extension as ext
lib, include = sys.argv[1], sys.argv[2]
std = re.findall(r"-std=c\+\+\d+", inspect.getsource(ext))[0]
flags = ["-O2", "-fPIC", std, "-Wall", "-Wno-unused-parameter",
         f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
         "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C",
         "-I" + include, "-I" + sysconfig.get_paths()["include"]]
flags += ["-I" + d for d in ext.include_paths()]
for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{name}", None)
    if value is not None:
        flags.append(f'-DPYBIND11_{name}="{value}"')
sources = sorted(glob.glob("csrc/*.cc"))
def compile_one(src):
    out = src[:-3] + ".o"
    subprocess.run(["g++", *flags, "-c", src, "-o", out], check=True)
    return out
with concurrent.futures.ThreadPoolExecutor(int(os.environ.get("JOBS", "16"))) as pool:
    objects = list(pool.map(compile_one, sources))
torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
suffix = sysconfig.get_config_var("EXT_SUFFIX")
subprocess.run(["g++", "-shared", *objects, "-o", f"weft_torch/_C{suffix}", "-L" + torch_lib,
                "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-L" + lib, "-lweft",
                f"-Wl,-rpath,{lib}"], check=True)
EOF
  tail -40 "$DEST/build.log"
  echo "torch_build.sh: the build failed (full log: $DEST/build.log)" >&2
  exit 1
fi
mkdir -p "$DEST/python"
cp -r "$DEST/src/weft_torch" "$DEST/python/"
echo "torch_build.sh: built in $((SECONDS - start)) s (MAX_JOBS=$JOBS)"
LIBS="$DEST/lib:$BUNDLE:$BUNDLE/lib"
cat > "$DEST/env.sh" <<EOF
export PYTHONPATH=$DEST/python\${PYTHONPATH:+:\$PYTHONPATH}
export LD_LIBRARY_PATH=$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
EOF
if ! (. "$DEST/env.sh" && cd / && "$PY" -c 'import weft_torch, weft_torch._C as c; print("weft_torch imports; weft", c.version(), "device runtime", c.device_runtime())'); then
  echo "torch_build.sh: the built weft_torch does not import" >&2
  exit 1
fi

# A one-rank group (weftCommInitRank inside torch's process, a CPU and a CUDA all_reduce), under
# the plain environment, then without hwloc's plugins, without UCX, and without both and UCX's
# memory hooks: the first try on the lent machine (torch 2.11, Python 3.12) aborted in the
# WeftBackend constructor with "free(): invalid pointer", cause unknown (weft's own tools run
# there; torch's process differs by the libraries it loaded). The first variant that works is
# added to env.sh; when none does, the traces and a native backtrace say where it stopped.
cat > "$DEST/smoke.py" <<'EOF'
import faulthandler; faulthandler.enable()
import sys, torch, torch.distributed as dist
import weft_torch
step = lambda s: print("smoke:", s, flush=True)
step("imported")
# Allocators and UCX in this process: a preloaded malloc (ML images often preload one) freed
# by another allocator gives exactly "free(): invalid pointer".
maps = open("/proc/self/maps").read()
step("loaded: " + ", ".join(sorted({l.split()[-1].rsplit("/", 1)[-1] for l in maps.splitlines()
                                   if any(k in l for k in ("malloc", "jemalloc", "tcmalloc", "libucm", "libucs", "hwloc"))})))
dist.init_process_group("weft", rank=0, world_size=1, init_method="tcp://127.0.0.1:" + sys.argv[1])
step("init_process_group")
t = torch.ones(4); dist.all_reduce(t); assert t.tolist() == [1.0] * 4; step("cpu all_reduce")
if torch.cuda.is_available():
    t = torch.ones(4, device="cuda"); dist.all_reduce(t); assert t.cpu().tolist() == [1.0] * 4
    step("cuda all_reduce")
dist.destroy_process_group()
step("ok")
EOF
port=29611
chosen=""
# hwloc's plugins (cuda, nvml, ...) load only where their libraries do, as in torch's process,
# and come from the machine's hwloc, not the bundle's: the second variant keeps them out.
no_hwloc_plugins="HWLOC_PLUGINS_DIR=/nonexistent HWLOC_COMPONENTS=-cuda,-nvml,-opencl,-rsmi,-levelzero,-gl"
no_ucx_hooks="UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no"
echo "torch_build.sh: LD_PRELOAD=${LD_PRELOAD:-(unset)}"
for variant in "" "$no_hwloc_plugins" "WEFT_TRANSPORT=tcp" \
               "$no_hwloc_plugins WEFT_TRANSPORT=tcp $no_ucx_hooks" \
               "$no_hwloc_plugins WEFT_TRANSPORT=tcp $no_ucx_hooks LD_PRELOAD="; do
  port=$((port + 1))
  out=$( (. "$DEST/env.sh" && cd / && env $variant WEFT_DEBUG=INFO timeout 60 "$PY" "$DEST/smoke.py" $port) 2>&1)
  if echo "$out" | grep -q "^smoke: ok"; then chosen="ok:$variant"; break; fi
  echo "torch_build.sh: a one-rank group failed with [${variant:-the plain environment}]:"
  echo "$out" | grep -v '^W1' | tail -25 | sed 's/^/    /'
done
if [ -z "$chosen" ]; then
  # The native stack of the failure (the image has cuda-gdb, no gdb).
  if command -v cuda-gdb >/dev/null; then
    echo "torch_build.sh: native backtrace of the plain environment's failure:"
    (. "$DEST/env.sh" && cd / && timeout 90 cuda-gdb -batch -ex run -ex "bt 40" \
       --args "$PY" "$DEST/smoke.py" $((port + 1))) 2>&1 | grep -E '^#|signal|Abort' | head -50
  fi
  echo "torch_build.sh: no environment ran a one-rank weft group in this torch process" >&2
  exit 1
fi
variant=${chosen#ok:}
for assignment in $variant; do echo "export $assignment" >> "$DEST/env.sh"; done
echo "torch_build.sh: a one-rank group (CPU all_reduce, and CUDA where torch has a GPU) ran with [${variant:-the plain environment}]"
echo "torch_build.sh: use (written to $DEST/env.sh)"
sed 's/^/    /' "$DEST/env.sh"
