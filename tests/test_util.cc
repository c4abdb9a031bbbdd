// Test helpers (see test_util.h).
#include "test_util.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "kernels/half.h"

namespace weft_test {

std::string RunOnComms(const std::vector<weftComm_t>& comms,
                       const std::function<std::string(weftComm_t, int)>& fn) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] { errors[r] = fn(comms[r], static_cast<int>(r)); });
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
  return "";
}

std::string RunRanks(int n, const std::function<std::string(weftComm_t, int)>& fn) {
  std::vector<weftComm_t> comms(n);
  if (weftCommInitAll(comms.data(), n, nullptr) != weftSuccess)
    return std::string("weftCommInitAll failed: ") + weftGetLastError(nullptr);
  std::string err = RunOnComms(comms, fn);
  for (weftComm_t c : comms) weftCommDestroy(c);
  return err;
}

const std::vector<weftDataType_t>& AllTypes() {
  static const std::vector<weftDataType_t> t = {weftInt8,    weftUint8,   weftInt32, weftUint32,
                                                weftInt64,   weftUint64,  weftFloat16,
                                                weftBfloat16, weftFloat32, weftFloat64};
  return t;
}

const std::vector<weftRedOp_t>& AllOps() {
  static const std::vector<weftRedOp_t> o = {weftSum, weftProd, weftMax, weftMin, weftAvg};
  return o;
}

std::string TypeName(weftDataType_t t) {
  switch (t) {
    case weftInt8: return "int8";
    case weftUint8: return "uint8";
    case weftInt32: return "int32";
    case weftUint32: return "uint32";
    case weftInt64: return "int64";
    case weftUint64: return "uint64";
    case weftFloat16: return "float16";
    case weftBfloat16: return "bfloat16";
    case weftFloat32: return "float32";
    case weftFloat64: return "float64";
    default: return "type" + std::to_string(static_cast<int>(t));
  }
}

std::string OpName(weftRedOp_t o) {
  switch (o) {
    case weftSum: return "sum";
    case weftProd: return "prod";
    case weftMax: return "max";
    case weftMin: return "min";
    case weftAvg: return "avg";
    default: return "op" + std::to_string(static_cast<int>(o));
  }
}

double InputValue(weftRedOp_t op, int rank, size_t i) {
  if (op == weftProd) return ((rank + i) % 3 == 0) ? 2.0 : 1.0;  // product <= 2^nranks
  return static_cast<double>((rank * 7 + i * 3) % 11);            // sum <= 10 * nranks
}

void Store(void* dst, weftDataType_t t, size_t i, double v) {
  switch (t) {
    case weftInt8: static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(v); break;
    case weftUint8: static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(v); break;
    case weftInt32: static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v); break;
    case weftUint32: static_cast<uint32_t*>(dst)[i] = static_cast<uint32_t>(v); break;
    case weftInt64: static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(v); break;
    case weftUint64: static_cast<uint64_t*>(dst)[i] = static_cast<uint64_t>(v); break;
    case weftFloat16: static_cast<uint16_t*>(dst)[i] = weft::FloatToHalf(static_cast<float>(v)); break;
    case weftBfloat16: static_cast<uint16_t*>(dst)[i] = weft::FloatToBfloat16(static_cast<float>(v)); break;
    case weftFloat32: static_cast<float*>(dst)[i] = static_cast<float>(v); break;
    case weftFloat64: static_cast<double*>(dst)[i] = v; break;
    default: break;
  }
}

double Load(const void* src, weftDataType_t t, size_t i) {
  switch (t) {
    case weftInt8: return static_cast<const int8_t*>(src)[i];
    case weftUint8: return static_cast<const uint8_t*>(src)[i];
    case weftInt32: return static_cast<const int32_t*>(src)[i];
    case weftUint32: return static_cast<const uint32_t*>(src)[i];
    case weftInt64: return static_cast<double>(static_cast<const int64_t*>(src)[i]);
    case weftUint64: return static_cast<double>(static_cast<const uint64_t*>(src)[i]);
    case weftFloat16: return weft::HalfToFloat(static_cast<const uint16_t*>(src)[i]);
    case weftBfloat16: return weft::Bfloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    case weftFloat32: return static_cast<const float*>(src)[i];
    case weftFloat64: return static_cast<const double*>(src)[i];
    default: return NAN;
  }
}

void FillInputs(void* buf, weftDataType_t t, weftRedOp_t op, int rank, size_t count, size_t base) {
  for (size_t k = 0; k < count; ++k) Store(buf, t, k, InputValue(op, rank, base + k));
}

double Expected(weftDataType_t t, weftRedOp_t op, int nranks, size_t i) {
  double acc = InputValue(op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = InputValue(op, r, i);
    switch (op) {
      case weftSum: case weftAvg: acc += v; break;
      case weftProd: acc *= v; break;
      case weftMax: acc = std::max(acc, v); break;
      case weftMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  // Integers wrap in their width (sum <= 80 and prod <= 256 only wrap for 8-bit types).
  unsigned char tmp[8];
  Store(tmp, t, 0, 0);
  switch (t) {
    case weftInt8: { int8_t x = static_cast<int8_t>(static_cast<int64_t>(acc)); acc = x; break; }
    case weftUint8: { uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(acc)); acc = x; break; }
    default: break;
  }
  if (op == weftAvg) {
    switch (t) {
      case weftFloat16: return weft::HalfToFloat(weft::FloatToHalf(static_cast<float>(acc) / nranks));
      case weftBfloat16: return weft::Bfloat16ToFloat(weft::FloatToBfloat16(static_cast<float>(acc) / nranks));
      case weftFloat32: return static_cast<float>(acc) / static_cast<float>(nranks);
      case weftFloat64: return acc / nranks;
      default: return std::trunc(acc / nranks);  // integer avg truncates
    }
  }
  return acc;
}

std::string CheckReduced(const void* buf, weftDataType_t t, weftRedOp_t op, int nranks,
                         size_t count, size_t base) {
  for (size_t k = 0; k < count; ++k) {
    double got = Load(buf, t, k), want = Expected(t, op, nranks, base + k);
    if (got != want && !(std::isnan(got) && std::isnan(want))) {
      return TypeName(t) + " " + OpName(op) + " element " + std::to_string(k) + ": got " +
             std::to_string(got) + " want " + std::to_string(want);
    }
  }
  return "";
}

std::string BinPath(const std::string& name) { return std::string(WEFT_BIN_DIR) + "/" + name; }

}  // namespace weft_test
