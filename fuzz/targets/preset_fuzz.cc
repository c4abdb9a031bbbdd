// Fuzz target: preset names (WEFT_TOPO_FILE=preset:NAME, weft-topo --preset, weft-sim
// --preset; src/topo/presets.h), with a rank count. A name either builds a fabric of the asked
// size or fails with a message naming it.
//
// Sizes: presets accept any node/host/rank count, and a 666662-rank netns preset takes more
// than 25 s to build and digest under ASan (a fair request, not a parser bug; noted in
// fuzz/README.md). Names with a number above 4096 are skipped so the fuzzer spends its time
// on parsing instead of on building huge fabrics.
#include <cctype>

#include "fuzz_common.h"
#include "topo/presets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft_fuzz::Bytes in(data, size);
  int nranks = static_cast<int16_t>(in.U32() & 0xffff) % 1025;  // -1024..1024, 0 = own size
  std::string name = in.Rest();
  unsigned long number = 0;
  for (char c : name) {
    number = isdigit(static_cast<unsigned char>(c)) ? number * 10 + (c - '0') : 0;
    if (number > 4096) return 0;
  }
  auto fabric = weft::MakePreset(name, nranks);
  if (!fabric.ok()) {
    FuzzCheck(!fabric.status().message().empty(), "a rejected preset must say why");
    return 0;
  }
  if (nranks > 0) FuzzCheck(fabric.value()->nranks() == nranks, "preset has another rank count");
  FuzzCheck(fabric.value()->nranks() > 0, "preset with no ranks");
  (void)fabric.value()->Digest();
  return 0;
}
