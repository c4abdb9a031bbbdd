// Compressed allreduce for the DDP communication hooks (weft_torch/hooks.py): a compression
// spec parsed by weft itself (so the hooks accept exactly what WEFT_COMPRESSION and
// weft-perf --compress accept, with weft's own error messages), exposed to Python.
// WeftBackend::allreduceCompressed (compressed_allreduce.cc) runs weftAllReduceCompressed on
// a bucket with the hook's per-bucket error-feedback residual.
#pragma once

#include <cstddef>
#include <string>

#include <weft/weft_compress.h>

namespace weft_torch {

class CompressionSpec {
 public:
  // Parses weft's text form ("int8", "fp8", "sign1", "topk:ratio=0.01,seed=3", ...). Throws
  // ValueError naming the text and weft's reason when weftCompressionParse refuses it.
  explicit CompressionSpec(const std::string& text);

  const weftCompression& spec() const { return spec_; }
  const std::string& text() const { return text_; }
  std::string codecName() const { return weftCodecName(spec_.codec); }
  // Bytes `count` float32 values encode to (what one rank's contribution puts on the wire).
  size_t encodedBytes(size_t count) const;

 private:
  weftCompression spec_{};
  std::string text_;
};

}  // namespace weft_torch
