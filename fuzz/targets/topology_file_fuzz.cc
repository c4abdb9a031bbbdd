// Fuzz target: topology files (WEFT_TOPO_FILE, weft-topo --save; src/topo/fabric.h). A file
// either builds a fabric or fails with a message; a built fabric answers every question the
// selector asks (groups, links, routes), describes itself, and saves and reloads to the same
// digest (every rank must build the identical fabric from the same bytes).
//
// Sizes: a `fabric nhosts=N nranks=M` record makes the parser build N hosts and check M ranks,
// so a 40-byte file could ask for 10^11 hosts (refused above kMaxFabricRanks since ff8958d:
// fuzz/README.md, the fifth campaign's findings) or cost seconds per input. The parsing of
// each record does not depend on N, so files whose fabric records ask for more than
// kMaxFabric hosts or ranks are skipped.
#include <algorithm>

#include "fuzz_common.h"
#include "topo/fabric.h"

constexpr int64_t kMaxFabric = 256;

bool AsksForTooMany(const std::vector<weft::Record>& recs) {
  for (const weft::Record& r : recs) {
    if (r.kind != "fabric") continue;
    for (const char* key : {"nhosts", "nranks"}) {
      weft::StatusOr<int64_t> n = r.GetInt(key, -1);
      if (n.ok() && *n > kMaxFabric) return true;
    }
  }
  return false;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto recs = weft::ParseRecords(weft_fuzz::AsString(data, size), "fuzz.topo");
  if (!recs.ok() || AsksForTooMany(*recs)) return 0;
  auto fabric = weft::FabricFromRecords(*recs, "fuzz.topo");
  if (!fabric.ok()) {
    FuzzCheck(!fabric.status().message().empty(), "a rejected topology must say why");
    return 0;
  }
  const weft::Fabric& f = *fabric.value();
  int n = std::min(f.nranks(), 16);  // questions about the first ranks: enough for coverage
  for (int a = 0; a < n; ++a) {
    (void)f.Leaf(a);
    (void)f.Compute(a);
    (void)f.MemoryResource(a);
    for (int b = 0; b < n; ++b) {
      (void)f.Link(a, b, true);
      weft::Route r = f.RouteOf(a, b, a % 2 == 0);
      FuzzCheck(r.nres >= 0 && r.nres <= weft::Route::kMaxResources, "route resource count out of range");
      for (int i = 0; i < r.nres; ++i)
        FuzzCheck(r.res[i] >= 0 && r.res[i] < f.num_resources(), "route names an unknown resource");
    }
  }
  (void)f.HostGroups();
  (void)f.NumaGroups();
  (void)f.AllRanksMappable(true);
  (void)f.Describe();
  auto reloaded = weft::FabricFromRecords(f.ToRecords(), "fuzz.topo saved");
  FuzzCheck(reloaded.ok(), "a saved fabric does not load again");
  FuzzCheck(reloaded.value()->Digest() == f.Digest(), "a saved fabric reloads with another digest");
  return 0;
}
