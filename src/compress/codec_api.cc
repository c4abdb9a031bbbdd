// The codec half of include/weft/weft_compress.h: spec defaults and parsing, encoded sizes,
// and encode/decode of host buffers (the kernels are kernels/codec*.{h,cc}).
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compress/compress_error.h"
#include "kernels/codec.h"
#include "weft/weft_compress.h"

namespace weft::compress {
namespace {

// The sizes derived from `count` (its float32 values, its encoding) must not wrap.
Status CheckEncodable(size_t count) {
  size_t bytes = 0;
  if (!__builtin_mul_overflow(count, codec::kMaxEncodedBytesPerValue, &bytes) &&
      bytes <= static_cast<size_t>(PTRDIFF_MAX))
    return OkStatus();
  return InvalidArgument("count=" + std::to_string(count) +
                         " is too large: its encoding's size does not fit in a buffer");
}

Status CheckSpec(const weftCompression* spec) {
  if (spec == nullptr) return InvalidArgument("spec is NULL");
  const std::string problem = codec::ValidateSpec(*spec);
  return problem.empty() ? OkStatus() : InvalidArgument(problem);
}

bool CodecFromName(const std::string& name, weftCodec_t* codec) {
  static const struct {
    const char* name;
    weftCodec_t codec;
  } kNames[] = {{"bf16", weftCodecBf16},       {"fp16", weftCodecFp16},
                {"fp8", weftCodecFp8E4M3},     {"fp8e4m3", weftCodecFp8E4M3},
                {"fp8e5m2", weftCodecFp8E5M2}, {"int8", weftCodecInt8},
                {"int4", weftCodecInt4},       {"topk", weftCodecTopK},
                {"sign1", weftCodecSign1},     {"1bit", weftCodecSign1}};
  for (const auto& entry : kNames)
    if (name == entry.name) {
      *codec = entry.codec;
      return true;
    }
  return false;
}

bool ParseNumber(const std::string& text, double* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *value = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size();
}

// One OPTION of "NAME:OPTION,...".
Status ApplyOption(const std::string& option, weftCompression* spec) {
  if (option == "stochastic") {
    spec->flags |= WEFT_COMPRESS_STOCHASTIC;
    return OkStatus();
  }
  if (option == "hadamard") {
    spec->flags |= WEFT_COMPRESS_HADAMARD;
    return OkStatus();
  }
  if (option == "flat") {
    spec->flags |= WEFT_COMPRESS_FLAT;
    return OkStatus();
  }
  const size_t eq = option.find('=');
  const std::string key = eq == std::string::npos ? "ratio" : option.substr(0, eq);
  const std::string text = eq == std::string::npos ? option : option.substr(eq + 1);
  double value = 0;
  if (!ParseNumber(text, &value))
    return InvalidArgument("option '" + option + "': '" + text + "' is not a number");
  if (key == "ratio") {
    spec->ratio = static_cast<float>(value);
  } else if (key == "block") {
    if (value < 0 || value > 4294967295.0 || value != static_cast<double>(static_cast<uint64_t>(value)))
      return InvalidArgument("option 'block=" + text + "' is not a block size");
    spec->block = static_cast<uint32_t>(value);
  } else if (key == "seed") {
    spec->seed = std::strtoull(text.c_str(), nullptr, 0);
  } else {
    return InvalidArgument("unknown option '" + key +
                           "' (block=N, ratio=R, seed=S, stochastic, hadamard, flat)");
  }
  return OkStatus();
}

Status Parse(const char* text, weftCompression* spec) {
  if (text == nullptr) return InvalidArgument("text is NULL");
  if (spec == nullptr) return InvalidArgument("spec is NULL");
  const std::string all(text);
  const size_t colon = all.find(':');
  const std::string name = all.substr(0, colon);
  weftCodec_t codec = weftCodecNone;
  if (!CodecFromName(name, &codec))
    return InvalidArgument("codec '" + name +
                           "' is unknown (bf16, fp16, fp8, fp8e4m3, fp8e5m2, int8, int4, sign1, "
                           "1bit, topk)");
  weftCompression parsed;
  weftCompressionDefault(codec, &parsed);
  if (colon != std::string::npos) {
    std::string rest = all.substr(colon + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t comma = rest.find(',', start);
      const std::string option = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      WEFT_RETURN_IF_ERROR(ApplyOption(option, &parsed));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  WEFT_RETURN_IF_ERROR(CheckSpec(&parsed));
  *spec = parsed;
  return OkStatus();
}

}  // namespace
}  // namespace weft::compress

using namespace weft;            // NOLINT: C API implementation file
using namespace weft::compress;  // NOLINT

extern "C" {

weftResult_t weftCompressionDefault(weftCodec_t codec, weftCompression* spec) {
  if (spec == nullptr) return Report(InvalidArgument("weftCompressionDefault: spec is NULL"));
  spec->codec = codec;
  spec->block = WEFT_COMPRESS_DEFAULT_BLOCK;
  spec->ratio = 0.01f;
  spec->seed = 0;
  spec->flags = 0;
  return Report(CheckSpec(spec).WithContext("weftCompressionDefault"));
}

weftResult_t weftCompressionParse(const char* text, weftCompression* spec) {
  return Report(Parse(text, spec).WithContext(std::string("weftCompressionParse(\"") +
                                              (text ? text : "NULL") + "\")"));
}

const char* weftCodecName(weftCodec_t codec) { return codec::CodecName(codec); }

weftResult_t weftCompressedSize(const weftCompression* spec, size_t count, size_t* bytes) {
  Status st = CheckSpec(spec);
  if (st.ok() && bytes == nullptr) st = InvalidArgument("bytes is NULL");
  if (st.ok()) st = CheckEncodable(count);
  if (!st.ok()) return Report(st.WithContext("weftCompressedSize"));
  *bytes = codec::EncodedBytes(*spec, count);
  return weftSuccess;
}

weftResult_t weftEncode(const weftCompression* spec, const float* src, size_t count, void* dst,
                        uint64_t stream_id) {
  Status st = CheckSpec(spec);
  if (st.ok() && count > 0 && (src == nullptr || dst == nullptr))
    st = InvalidArgument(std::string(src == nullptr ? "src" : "dst") + " is NULL with count=" +
                         std::to_string(count));
  if (st.ok()) st = CheckEncodable(count);
  if (st.ok() && spec->codec == weftCodecTopK && count > 0xFFFFFFFFull)
    st = InvalidArgument("count=" + std::to_string(count) + " exceeds top-k's 32-bit indices");
  if (st.ok()) st = CatchExceptions([&] {
    codec::Encode(*spec, src, count, static_cast<uint8_t*>(dst), stream_id);
    return OkStatus();
  });
  return st.ok() ? weftSuccess : Report(st.WithContext("weftEncode"));
}

weftResult_t weftDecode(const weftCompression* spec, const void* src, size_t count, float* dst) {
  Status st = CheckSpec(spec);
  if (st.ok() && count > 0 && (src == nullptr || dst == nullptr))
    st = InvalidArgument(std::string(src == nullptr ? "src" : "dst") + " is NULL with count=" +
                         std::to_string(count));
  if (st.ok()) st = CheckEncodable(count);
  if (st.ok()) st = CatchExceptions([&] {
    codec::Decode(*spec, static_cast<const uint8_t*>(src), count, dst);
    return OkStatus();
  });
  return st.ok() ? weftSuccess : Report(st.WithContext("weftDecode"));
}

}  // extern "C"
