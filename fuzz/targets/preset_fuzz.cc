// Fuzz target: preset names (WEFT_TOPO_FILE=preset:NAME, weft-topo --preset, weft-sim
// --preset; src/topo/presets.h), with a rank count. A name either builds a fabric of the asked
// size or fails with a message naming it.
//
// Sizes: presets accept up to kMaxFabricRanks (131072) ranks in all, and building and digesting
// a fabric costs time in proportion to its ranks (a 666662-rank netns preset takes more than
// 25 s under ASan: fuzz/crashes/preset-timeout-huge-netns-preset). The parsing does not
// depend on the size, so the target asks only for fabrics of at most kMaxRanks ranks: the
// product of the numbers in the name (nodes, KxR, R) and the rank count are capped; inputs
// over the cap are skipped, for speed. (Larger presets, and products above 2^31, are refused by
// MakePreset since ff8958d: fuzz/README.md, the fifth campaign's findings.)
#include <cctype>

#include "fuzz_common.h"
#include "topo/presets.h"

constexpr unsigned long kMaxRanks = 128;

// Whether the name may ask for more than kMaxRanks ranks: the product of its counts (runs of
// digits, except those after a letter other than 'x', which belong to a name like h100) is
// over the cap, where dgx-h100:N asks for 8 ranks per node. An over-estimate (an
// oversubscription's digits count too) only skips a few more names.
bool AsksForTooMany(const std::string& name) {
  unsigned long product = name.find("dgx") != std::string::npos ? 8 : 1;
  for (size_t i = 0; i < name.size();) {
    if (!isdigit(static_cast<unsigned char>(name[i]))) { ++i; continue; }
    bool part_of_name = i > 0 && isalpha(static_cast<unsigned char>(name[i - 1])) && name[i - 1] != 'x';
    unsigned long number = 0;
    for (; i < name.size() && isdigit(static_cast<unsigned char>(name[i])); ++i) {
      number = number * 10 + (name[i] - '0');
      if (number > kMaxRanks && !part_of_name) return true;
      if (number > 1000000) number = 1000000;  // a long name's digits: no overflow
    }
    if (!part_of_name && number > 0) product *= number;
    if (product > kMaxRanks) return true;
  }
  return false;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft_fuzz::Bytes in(data, size);
  // -128..128, 0 = the preset's own size.
  int nranks = static_cast<int16_t>(in.U32() & 0xffff) % static_cast<int>(kMaxRanks + 1);
  std::string name = in.Rest();
  if (AsksForTooMany(name)) return 0;
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
