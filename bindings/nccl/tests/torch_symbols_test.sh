#!/usr/bin/env bash
# Every NCCL function PyTorch's libtorch_cuda.so imports is exported by the shim. Under
# LD_PRELOAD the shim (soname libnccl.so.2) replaces NCCL, which is then never loaded: a
# function torch imports and the shim lacks is a fatal "symbol lookup error" when called.
#   torch_symbols_test.sh LIBTORCH_CUDA LIBWEFT_NCCL
# Exit 77 (ctest: skipped) when LIBTORCH_CUDA is empty or missing, saying so.
set -euo pipefail
torch=${1:-} lib=$2
if [ -z "$torch" ] || [ ! -f "$torch" ]; then
  echo "SKIP: no libtorch_cuda.so to check (configure with -DWEFT_TORCH_CUDA_LIB=<path>," \
       "or have torch in <source>/.venv)"
  exit 77
fi
imported=$(nm -D --undefined-only "$torch" | awk '{print $2}' | sed 's/@.*//' |
           grep -E '^p?nccl[A-Z]' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwiV]$/ {print $3}' | sed 's/@.*//' | sort -u)
missing=$(comm -23 <(echo "$imported") <(echo "$exported"))
echo "$torch imports $(echo "$imported" | wc -l) NCCL functions"
if [ -n "$missing" ]; then
  echo "imported by torch but not exported by the shim:"
  echo "$missing"
  exit 1
fi
echo "all exported by $lib"
