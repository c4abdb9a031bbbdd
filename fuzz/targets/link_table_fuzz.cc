// Fuzz target: link tables (WEFT_LINK_TABLE and a topology file's link/compute records;
// src/topo/link_table.h). Applying records either succeeds or fails with a message; an
// applied table writes records that apply again to the same values.
#include "fuzz_common.h"
#include "topo/link_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto recs = weft::ParseRecords(weft_fuzz::AsString(data, size), "fuzz.links");
  if (!recs.ok()) return 0;
  weft::LinkTable table = weft::LinkTable::Defaults();
  weft::Status st = table.Apply(*recs);
  if (!st.ok()) {
    FuzzCheck(!st.message().empty(), "a rejected link table must say why");
    return 0;
  }
  std::vector<weft::Record> saved = table.ToRecords();
  weft::LinkTable again = weft::LinkTable::Defaults();
  FuzzCheck(again.Apply(saved).ok(), "a saved link table does not apply again");
  FuzzCheck(weft::FormatRecords(again.ToRecords()) == weft::FormatRecords(saved),
            "a saved link table applies to other values");
  return 0;
}
