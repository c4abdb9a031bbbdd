#include "transports/ipc/ipc_wire.h"

#include <cstring>
#include <string>

namespace weft::ipc {

Status CheckPeerRecord(const PeerRecord& mine, const PeerRecord& theirs, int from) {
  const std::string who = "ipc: rank " + std::to_string(from) + "'s record";
  if (theirs.magic != kRecordMagic || theirs.version != kRecordVersion || theirs.rank != from)
    return InternalError(who + " is corrupt (magic " + std::to_string(theirs.magic) +
                         ", version " + std::to_string(theirs.version) + ", rank " +
                         std::to_string(theirs.rank) + ")");
  if (std::strncmp(mine.runtime, theirs.runtime, sizeof mine.runtime) != 0)
    return InvalidUsage(who + ": device runtime '" +
                        std::string(theirs.runtime, strnlen(theirs.runtime, sizeof theirs.runtime)) +
                        "' differs from this rank's '" +
                        std::string(mine.runtime, strnlen(mine.runtime, sizeof mine.runtime)) +
                        "' (WEFT_DEVICE must agree)");
  if (theirs.window_bytes != mine.window_bytes)
    return InvalidUsage(who + ": WEFT_IPC_WINDOW_BYTES=" + std::to_string(theirs.window_bytes) +
                        " differs from this rank's " + std::to_string(mine.window_bytes) +
                        " (every rank must set the same value)");
  if (theirs.pid <= 0 || theirs.device < 0)
    return InternalError(who + " has pid " + std::to_string(theirs.pid) + ", device " +
                         std::to_string(theirs.device));
  return OkStatus();
}

}  // namespace weft::ipc
