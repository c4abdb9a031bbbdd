// fuzz/fuzz_common.h: small helpers shared by the libFuzzer targets in fuzz/targets/.
//
// A target feeds bytes from outside weft (a wire message, a file, an environment variable)
// to the library's parser and checks the parser's own promises: no crash, no sanitizer
// report, and where the format allows, that what was accepted survives a round trip. A
// broken promise calls FuzzCheck, which aborts so libFuzzer records the input as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace weft_fuzz {

inline std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Aborts with a message: libFuzzer saves the input that got here as a crash reproducer.
#define FuzzCheck(cond, what)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n", __FILE__,      \
                   __LINE__, (what));                                             \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

// Consumes bytes from the front of the input (for targets that derive several values).
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t left() const { return size_; }
  uint8_t U8() { return Take<uint8_t>(); }
  uint32_t U32() { return Take<uint32_t>(); }
  uint64_t U64() { return Take<uint64_t>(); }
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(data_), size_);
    data_ += size_;
    size_ = 0;
    return s;
  }
  // Up to `n` bytes, or up to the first '\0' separator (consumed), whichever comes first.
  std::string Field(size_t n) {
    size_t len = 0;
    while (len < size_ && len < n && data_[len] != 0) ++len;
    std::string s(reinterpret_cast<const char*>(data_), len);
    size_t used = len < size_ && data_[len] == 0 ? len + 1 : len;
    data_ += used;
    size_ -= used;
    return s;
  }

 private:
  template <typename T>
  T Take() {
    T v{};
    size_t n = size_ < sizeof(T) ? size_ : sizeof(T);
    std::memcpy(&v, data_, n);
    data_ += n;
    size_ -= n;
    return v;
  }
  const uint8_t* data_;
  size_t size_;
};

}  // namespace weft_fuzz
