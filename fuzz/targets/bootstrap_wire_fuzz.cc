// Fuzz target: the bootstrap's fixed-size wire records alone (src/core/bootstrap_wire.h), the
// pure twin of bootstrap (a real root and a real joining rank over loopback, ~300 inputs/s):
//   byte 0 even: the root's 8-byte verdict head (result code, message length) that a joining
//     rank reads from whoever answers at the root's address;
//   byte 0 odd: the 16-byte call header a rank reads from its ring neighbour before each setup
//     collective.
// Promises checked: accepted exactly when the rules allow (code a weftResult_t and length
// <= 1 MiB; op 1..3), accepted fields equal the bytes' and re-encode to the same bytes, a
// refusal is an InternalError naming the field.
#include "core/bootstrap_wire.h"
#include "fuzz_common.h"

namespace {

using namespace weft;
using namespace weft::bootstrap_wire;

void VerdictHead(const uint8_t head[kVerdictHeadBytes]) {
  const uint32_t code = Get32(head), len = Get32(head + 4);
  const bool valid = code < static_cast<uint32_t>(weftNumResults) && len <= kMaxVerdictMessageBytes;
  StatusOr<RootVerdictHead> v = DecodeRootVerdictHead(head);
  FuzzCheck(v.ok() == valid, "DecodeRootVerdictHead accepted what its rules refuse, or the reverse");
  if (!v.ok()) {
    FuzzCheck(v.status().code() == weftInternalError, "a bad verdict head is not an InternalError");
    FuzzCheck(v.status().message().find(code >= weftNumResults ? "result code" : "message length") !=
                  std::string::npos,
              "the refusal does not name the bad field");
    return;
  }
  FuzzCheck(static_cast<uint32_t>(v->code) == code && v->message_bytes == len, "decoded fields differ");
  uint8_t again[kVerdictHeadBytes];
  EncodeRootVerdictHead(v->code, v->message_bytes, again);
  FuzzCheck(std::memcmp(again, head, sizeof(again)) == 0, "verdict head round trip differs");
}

void CallHeaderBytes(const uint8_t in[kCallHeaderBytes]) {
  const uint32_t op = Get32(in);
  StatusOr<CallHeader> c = DecodeCallHeader(in);
  FuzzCheck(c.ok() == (op >= 1 && op <= 3), "DecodeCallHeader accepted an unknown op, or the reverse");
  if (!c.ok()) {
    FuzzCheck(c.status().message().find("op " + std::to_string(op)) != std::string::npos,
              "the refusal does not name the op");
    return;
  }
  FuzzCheck(std::string(CallOpName(c->op)) != "?", "an accepted op has no name");
  uint8_t again[kCallHeaderBytes];
  EncodeCallHeader(*c, again);
  FuzzCheck(std::memcmp(again, in, sizeof(again)) == 0, "call header round trip differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t record[kCallHeaderBytes] = {};
  std::memcpy(record, data + 1, size - 1 < sizeof(record) ? size - 1 : sizeof(record));
  if ((data[0] & 1) == 0) VerdictHead(record);
  else CallHeaderBytes(record);
  return 0;
}
