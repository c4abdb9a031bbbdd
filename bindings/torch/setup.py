"""Builds weft_torch: the "weft" torch.distributed backend over libweft's C API.

libweft is found, in this order, through
  WEFT_BUILD_DIR  a weft build tree (libweft.so at its top; headers from the source tree),
  WEFT_PREFIX     an installed weft (PREFIX/include, PREFIX/lib or lib64),
  pkg-config weft,
  ../../build     the repository's default build directory.
The extension records libweft's directory as its runtime path (rpath).

Build without isolation, so that the build sees the installed torch:
  pip install --no-build-isolation ./bindings/torch
"""
import os
import subprocess
import sys

from setuptools import find_packages, setup

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as error:  # pip's default isolated build has no torch in it
    sys.exit(f"weft_torch: building needs torch importable by the building Python ({error}). "
             "Install torch first, then build without build isolation so the build sees it: "
             "pip install --no-build-isolation ./bindings/torch")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def _pkg_config(flag):
    try:
        out = subprocess.run(["pkg-config", flag, "weft"], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [item[2:] for item in out.split()]


def find_weft():
    """(include_dir, library_dir) of the libweft to link against."""
    build_dir = os.environ.get("WEFT_BUILD_DIR")
    prefix = os.environ.get("WEFT_PREFIX")
    if build_dir:
        return os.path.join(REPO, "include"), os.path.abspath(build_dir)
    if prefix:
        for lib in ("lib", "lib64", "lib/x86_64-linux-gnu"):
            if os.path.exists(os.path.join(prefix, lib, "libweft.so")):
                return os.path.join(prefix, "include"), os.path.join(prefix, lib)
        raise SystemExit(f"weft_torch: no libweft.so under WEFT_PREFIX={prefix}")
    includes, libs = _pkg_config("--cflags-only-I"), _pkg_config("--libs-only-L")
    if includes is not None and libs:
        return includes[0], libs[0]
    return os.path.join(REPO, "include"), os.path.join(REPO, "build")


include_dir, library_dir = find_weft()
if not os.path.exists(os.path.join(library_dir, "libweft.so")):
    raise SystemExit(f"weft_torch: libweft.so not found in {library_dir}; build weft first "
                     "(scripts/setup.sh) or set WEFT_BUILD_DIR / WEFT_PREFIX")
SOURCES = ["module.cc", "weft_backend.cc", "collectives.cc", "weft_work.cc", "tensor_args.cc",
           "overhead_probe.cc", "compressed_allreduce.cc"]

setup(
    name="weft_torch",
    version="0.1.0",
    description="weft collectives as a torch.distributed backend",
    packages=find_packages(exclude=["tests"]),
    ext_modules=[
        CppExtension(
            name="weft_torch._C",
            sources=[os.path.join("csrc", s) for s in SOURCES],
            include_dirs=[include_dir],
            library_dirs=[library_dir],
            libraries=["weft"],
            extra_compile_args=["-O2", "-Wall", "-Wno-unused-parameter"],
            extra_link_args=[f"-Wl,-rpath,{library_dir}"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    # torch.distributed looks entry points up for backend names it does not know, so
    # init_process_group("weft") works without importing weft_torch first (torchrun scripts).
    entry_points={"torch.distributed.backends": ["weft = weft_torch:register"]},
    python_requires=">=3.9",
)
