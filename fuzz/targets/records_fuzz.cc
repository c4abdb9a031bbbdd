// Fuzz target: the record text format (src/topo/records.h) under topology files, link tables,
// tuning-adjacent files and the rank summaries ranks exchange at init. Accepted text must
// format and parse back to the same records; sizes parse as documented.
#include "fuzz_common.h"
#include "topo/records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text = weft_fuzz::AsString(data, size);
  weft::StatusOr<std::vector<weft::Record>> recs = weft::ParseRecords(text, "fuzz.records");
  if (recs.ok()) {
    std::string again = weft::FormatRecords(*recs);
    weft::StatusOr<std::vector<weft::Record>> round = weft::ParseRecords(again, "round trip");
    FuzzCheck(round.ok(), "formatted records do not parse");
    FuzzCheck(round->size() == recs->size(), "record count changed in a round trip");
    for (size_t i = 0; i < recs->size(); ++i) {
      FuzzCheck((*round)[i].kind == (*recs)[i].kind, "record kind changed in a round trip");
      FuzzCheck((*round)[i].fields == (*recs)[i].fields, "record fields changed in a round trip");
      for (const auto& kv : (*recs)[i].fields) {
        (void)(*recs)[i].GetInt(kv.first, 0);
        (void)(*recs)[i].GetDouble(kv.first, 0);
      }
    }
  }
  FuzzCheck(weft::PercentDecode(weft::PercentEncode(text)) == text, "percent round trip differs");
  weft::StatusOr<size_t> bytes = weft::ParseSize(text);
  if (bytes.ok() && *bytes != static_cast<size_t>(-1)) {
    weft::StatusOr<size_t> again = weft::ParseSize(weft::FormatSize(*bytes));
    FuzzCheck(again.ok() && *again == *bytes, "size round trip differs");
  }
  return 0;
}
