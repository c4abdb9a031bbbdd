// Test helpers: thread-per-rank communicators, closed-form inputs and expected values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace weft_test {

// Creates n thread-per-rank communicators (weftCommInitAll), runs fn(comm, rank) on n
// threads, destroys the communicators. Returns the first failure message (empty = all ok).
std::string RunRanks(int n, const std::function<std::string(weftComm_t, int)>& fn);
// Same with existing communicators.
std::string RunOnComms(const std::vector<weftComm_t>& comms,
                       const std::function<std::string(weftComm_t, int)>& fn);

const std::vector<weftDataType_t>& AllTypes();
const std::vector<weftRedOp_t>& AllOps();
std::string TypeName(weftDataType_t t);
std::string OpName(weftRedOp_t o);

// Input value of `rank` at element i for `op`, chosen so every reduction order is exact in
// every type (small integers; products of 1s and 2s).
double InputValue(weftRedOp_t op, int rank, size_t i);
// Writes value v (an exact small number) as type t at dst[i].
void Store(void* dst, weftDataType_t t, size_t i, double v);
// Reads element i of type t as double.
double Load(const void* src, weftDataType_t t, size_t i);
// Fills buf (count elements) with rank's inputs starting at element offset `base`.
void FillInputs(void* buf, weftDataType_t t, weftRedOp_t op, int rank, size_t count,
                size_t base = 0);
// The exact expected reduction over nranks at element i, as the library must produce it
// (wrapping integers, avg divided once and rounded in the type).
double Expected(weftDataType_t t, weftRedOp_t op, int nranks, size_t i);
// Compares count elements of buf against Expected(.., base + k); returns "" or a message.
std::string CheckReduced(const void* buf, weftDataType_t t, weftRedOp_t op, int nranks,
                         size_t count, size_t base = 0);

// Path of a built binary (tools, tests) in the build tree.
std::string BinPath(const std::string& name);

}  // namespace weft_test
