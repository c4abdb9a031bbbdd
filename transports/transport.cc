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

}  // namespace weft
