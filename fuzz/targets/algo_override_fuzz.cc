// Fuzz target: WEFT_ALGO (algorithms/algo_override.h), a string every rank reads from its
// environment. The parser must accept or reject with a message quoting the bad part; an
// accepted rule set must answer Lookup for any collective and size.
#include "algorithms/algo_override.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::StatusOr<weft::AlgoOverrides> parsed = weft::ParseAlgoOverrides(weft_fuzz::AsString(data, size));
  if (!parsed.ok()) {
    FuzzCheck(parsed.status().code() != weftSuccess, "an error with a success code");
    FuzzCheck(!parsed.status().message().empty(), "a rejected WEFT_ALGO must say why");
    return 0;
  }
  for (const weft::AlgoRule& rule : parsed->rules) {
    FuzzCheck(rule.min_bytes < rule.max_bytes, "accepted an empty size range");
    FuzzCheck(!rule.algorithm.empty(), "accepted a rule without an algorithm");
  }
  const size_t sizes[] = {0, 1, 8, 1023, 1024, 65536, size_t{1} << 30, static_cast<size_t>(-2)};
  for (int c = 0; c <= static_cast<int>(weft::Collective::kBarrier); ++c)
    for (size_t bytes : sizes) (void)parsed->Lookup(static_cast<weft::Collective>(c), bytes);
  return 0;
}
