// Fuzz target: the weftUniqueId (128 bytes a launcher ships to every rank, e.g. through a
// file or a store anyone on the job can write). UnpackUniqueId must reject what is not an id
// with an error and never crash; an accepted id must pack back to the same root and secret.
#include <cstring>

#include "core/bootstrap.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weftUniqueId uid;
  std::memset(&uid, 0, sizeof(uid));
  std::memcpy(&uid, data, size < sizeof(uid) ? size : sizeof(uid));
  weft::StatusOr<weft::BootstrapId> id = weft::UnpackUniqueId(uid);
  if (!id.ok()) {
    FuzzCheck(!id.status().message().empty(), "a rejected id must say why");
    return 0;
  }
  weftUniqueId again;
  weft::Status packed = weft::PackUniqueId(*id, &again);
  FuzzCheck(packed.ok(), "an accepted id must pack again");
  weft::StatusOr<weft::BootstrapId> round = weft::UnpackUniqueId(again);
  FuzzCheck(round.ok(), "a packed id must unpack");
  FuzzCheck(round->root == id->root, "root address changed in a round trip");
  FuzzCheck(round->secret == id->secret, "secret changed in a round trip");
  return 0;
}
