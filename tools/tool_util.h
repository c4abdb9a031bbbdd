// Helpers shared by the command-line tools (weft-topo, weft-sim).
#pragma once

#include <cstddef>
#include <string>

namespace weft {

// Element size for a dtype name as weft-perf and nccl-tests spell them; 0 when unknown.
inline size_t DtypeSizeByName(const std::string& d) {
  if (d == "int8" || d == "uint8" || d == "char") return 1;
  if (d == "half" || d == "float16" || d == "bfloat16" || d == "bf16") return 2;
  if (d == "float" || d == "float32" || d == "int32" || d == "uint32" || d == "int") return 4;
  if (d == "double" || d == "float64" || d == "int64" || d == "uint64") return 8;
  return 0;
}

}  // namespace weft
