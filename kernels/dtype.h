// Data types and reduction operators: sizes, validity and names.
//
// The single place that knows how wide each weftDataType_t is and which (dtype, op) values the
// library accepts. The fp8 enumerators are reserved in the public header (so the ABI does not
// change when they arrive) but are not accepted yet: they report size 0 and are invalid.
#pragma once

#include <cstddef>

#include "weft/weft.h"

namespace weft {

// Bytes per element; 0 for invalid or reserved (fp8) types.
size_t TypeSize(weftDataType_t dtype);
// True for the 10 accepted types (int8, uint8, int32, uint32, int64, uint64, float16,
// float32, float64, bfloat16). The reserved fp8 values return false.
bool IsValidDataType(weftDataType_t dtype);
// True for sum, prod, max, min, avg.
bool IsValidRedOp(weftRedOp_t op);
// "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
// "bfloat16"; "invalid" for anything else (including the reserved fp8 values).
const char* DataTypeName(weftDataType_t dtype);
// "sum", "prod", "max", "min", "avg"; "invalid" otherwise.
const char* RedOpName(weftRedOp_t op);

}  // namespace weft
