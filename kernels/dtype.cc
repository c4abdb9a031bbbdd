// Data type and reduction operator tables (see dtype.h).
#include "kernels/dtype.h"

namespace weft {

namespace {

struct TypeInfo {
  size_t size;       // 0 = not accepted
  const char* name;
};

// Indexed by weftDataType_t. Keep in the enum's order (weft.h).
constexpr TypeInfo kTypes[weftNumTypes] = {
    {1, "int8"},    {1, "uint8"},   {4, "int32"},   {4, "uint32"},   {8, "int64"},
    {8, "uint64"},  {2, "float16"}, {4, "float32"}, {8, "float64"},  {2, "bfloat16"},
    {0, "invalid"},  // weftFloat8e4m3: reserved
    {0, "invalid"},  // weftFloat8e5m2: reserved
};

constexpr const char* kOpNames[weftNumOps] = {"sum", "prod", "max", "min", "avg"};

// The enums are plain C enums: callers may pass any int, so range-check as int.
bool InTypeRange(weftDataType_t dtype) {
  return static_cast<int>(dtype) >= 0 && static_cast<int>(dtype) < weftNumTypes;
}

}  // namespace

size_t TypeSize(weftDataType_t dtype) { return InTypeRange(dtype) ? kTypes[dtype].size : 0; }

bool IsValidDataType(weftDataType_t dtype) { return TypeSize(dtype) != 0; }

bool IsValidRedOp(weftRedOp_t op) {
  return static_cast<int>(op) >= 0 && static_cast<int>(op) < weftNumOps;
}

const char* DataTypeName(weftDataType_t dtype) {
  return InTypeRange(dtype) ? kTypes[dtype].name : "invalid";
}

const char* RedOpName(weftRedOp_t op) { return IsValidRedOp(op) ? kOpNames[op] : "invalid"; }

}  // namespace weft
