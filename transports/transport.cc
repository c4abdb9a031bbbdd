// Transport's default registration (bookkeeping only) and the refusals of one-sided
// operations for transports that cannot do them (see transport.h).
#include "transports/transport.h"

namespace weft {

StatusOr<RegHandle> Transport::Register(const MemRef& mem) {
  const std::string who = std::string(name()) + " register";
  WEFT_RETURN_IF_ERROR(RegistrationCache::Validate(mem, who.c_str()));
  if (!mem.is_host())
    return InvalidArgument(who + ": " + MemKindName(mem.kind) + " memory (device " + std::to_string(mem.device) +
                           ") cannot be moved by this transport");
  if (const RegistrationCache::Entry* e = registrations_.Acquire(mem)) return e->handle;
  return registrations_.Add(mem, 0).handle;
}

Status Transport::Deregister(RegHandle handle) {
  bool last = false;
  return registrations_.Release(handle, &last, nullptr);
}

namespace {
Status NoOneSided(const Transport& t, const char* op) {
  return InvalidUsage(std::string(t.name()) + " transport: one-sided " + op + " is not supported");
}
}  // namespace

StatusOr<std::string> Transport::PackRemoteKey(RegHandle) { return NoOneSided(*this, "access (PackRemoteKey)"); }
StatusOr<Transport::RemoteKey> Transport::ImportRemoteKey(int, const std::string&) {
  return NoOneSided(*this, "access (ImportRemoteKey)");
}
Status Transport::PostPut(int, const MemRef&, RemoteKey, size_t, TransportRequest*) { return NoOneSided(*this, "put"); }
Status Transport::PostGet(int, const MemRef&, RemoteKey, size_t, TransportRequest*) { return NoOneSided(*this, "get"); }
Status Transport::Signal(int, uint64_t) { return NoOneSided(*this, "signal"); }
Status Transport::PostWait(int, TransportRequest*, uint64_t) { return NoOneSided(*this, "wait"); }

Status CheckPostArgs(const char* transport, const char* what, int rank, int nranks, int peer,
                     int channel, int max_channel, const MemRef& mem,
                     const TransportRequest* req, bool self_ok) {
  const std::string call = std::string(transport) + " " + what;
  if (peer < 0 || peer >= nranks || (peer == rank && !self_ok))
    return InvalidArgument(call + ": peer=" + std::to_string(peer) + " is not " +
                           (self_ok ? "a rank" : "another rank") + " of 0.." +
                           std::to_string(nranks - 1) + " (this is rank " + std::to_string(rank) + ")");
  if (channel < 0 || channel > max_channel)
    return InvalidArgument(call + ": channel=" + std::to_string(channel) + " is outside 0.." +
                           std::to_string(max_channel));
  if (req == nullptr) return InvalidArgument(call + ": req is NULL");
  if (mem.bytes > 0 && mem.ptr == nullptr)
    return InvalidArgument(call + " with rank " + std::to_string(peer) + ": buf is NULL for " +
                           std::to_string(mem.bytes) + " bytes");
  if (!mem.is_host()) {
    char addr[32];
    std::snprintf(addr, sizeof(addr), "%p", mem.ptr);
    return InvalidArgument(call + " with rank " + std::to_string(peer) + ": buf=" + addr +
                           " is " + MemKindName(mem.kind) + " memory of device " +
                           std::to_string(mem.device) + "; the " + transport +
                           " transport moves host memory only (device buffers are staged "
                           "through pinned host memory)");
  }
  return OkStatus();
}

}  // namespace weft
