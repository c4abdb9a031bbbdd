// Fuzz target: tuning files (WEFT_TUNING_FILE, src/tune/tuning_file.h), text a user or a
// sweep tool writes. Rejections carry "origin:line:"; accepted rules are well-formed and
// Lookup works for any collective and size.
#include "fuzz_common.h"
#include "tune/tuning_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::StatusOr<weft::TuningTable> table =
      weft::ParseTuningTable(weft_fuzz::AsString(data, size), "fuzz.tuning", /*check_registry=*/true);
  if (!table.ok()) {
    FuzzCheck(table.status().message().rfind("fuzz.tuning", 0) == 0,
              "a tuning file error does not start with the file name");
    return 0;
  }
  for (const weft::TuningRule& r : table->rules) {
    FuzzCheck(r.min_bytes < r.max_bytes, "accepted an empty size range");
    FuzzCheck(r.channels >= 1 && r.channels <= 64, "accepted channels outside 1..64");
  }
  const size_t sizes[] = {0, 8, 4096, size_t{1} << 20, static_cast<size_t>(-2)};
  for (int c = 0; c <= static_cast<int>(weft::Collective::kBarrier); ++c)
    for (size_t bytes : sizes) (void)table->Lookup(static_cast<weft::Collective>(c), bytes);
  return 0;
}
