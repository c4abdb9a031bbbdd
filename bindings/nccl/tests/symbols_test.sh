#!/usr/bin/env bash
# The shim exports exactly the functions nccl.h declares (nccl* and pnccl*), plus those of the
# newer NCCL that PyTorch imports (nccl_ext.h, when given): no more, no less.
#   symbols_test.sh NCCL_H LIBWEFT_NCCL [NCCL_EXT_H]
set -euo pipefail
header=$1 lib=$2 ext=${3:-}
declared=$(cat "$header" ${ext:+"$ext"} | grep -oE '\bp?nccl[A-Z][A-Za-z]*\(' | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TtWwiV]$/ {print $3}' | sed 's/@.*//' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
status=0
if [ -n "$missing" ]; then echo "declared in nccl.h but not exported:"; echo "$missing"; status=1; fi
if [ -n "$extra" ]; then echo "exported but not declared in nccl.h:"; echo "$extra"; status=1; fi
if [ "$soname" != "libnccl.so.2" ]; then echo "soname is '$soname', expected libnccl.so.2"; status=1; fi
# The shim itself needs no CUDA library (the driver is dlopen'ed); libweft may link the CUDA
# runtime when built with CUDA, but never the driver (libcuda.so), so it loads without a GPU.
needed=$(objdump -p "$lib" | awk '/NEEDED/ {print $2}')
if echo "$needed" | grep -q 'libcuda'; then echo "the shim links CUDA: $needed"; status=1; fi
if ldd "$lib" | grep -q 'libcuda\.so'; then echo "hard dependency on the CUDA driver:"; ldd "$lib"; status=1; fi
echo "$(echo "$declared" | wc -l) functions declared, $(echo "$exported" | wc -l) exported, soname $soname"
exit $status
