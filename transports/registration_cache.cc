// RegistrationCache (see registration_cache.h).
#include "transports/registration_cache.h"

namespace weft {

Status RegistrationCache::Validate(const MemRef& mem, const char* who) {
  if (mem.ptr == nullptr)
    return InvalidArgument(std::string(who) + ": ptr is NULL (" + std::to_string(mem.bytes) + " bytes)");
  if (mem.bytes == 0) return InvalidArgument(std::string(who) + ": bytes=0 (nothing to register)");
  return OkStatus();
}

const RegistrationCache::Entry* RegistrationCache::Acquire(const MemRef& mem) {
  char* b = static_cast<char*>(mem.ptr);
  // A linear scan: a communicator registers a handful of buffers (user buffers, scratch).
  for (auto& [h, e] : by_handle_) {
    if (e.kind == mem.kind && e.device == mem.device && b >= e.begin && b + mem.bytes <= e.begin + e.bytes) {
      ++e.refs;
      return &e;
    }
  }
  return nullptr;
}

const RegistrationCache::Entry& RegistrationCache::Add(const MemRef& mem, uint64_t transport_data) {
  Entry e;
  e.handle = next_++;
  e.begin = static_cast<char*>(mem.ptr);
  e.bytes = mem.bytes;
  e.kind = mem.kind;
  e.device = mem.device;
  e.refs = 1;
  e.transport_data = transport_data;
  return by_handle_[e.handle] = e;
}

const RegistrationCache::Entry* RegistrationCache::Find(RegHandle handle) const {
  auto it = by_handle_.find(handle);
  return it == by_handle_.end() ? nullptr : &it->second;
}

Status RegistrationCache::Release(RegHandle handle, bool* last, Entry* released) {
  auto it = by_handle_.find(handle);
  if (it == by_handle_.end())
    return InvalidArgument("deregister: handle " + std::to_string(handle) + " is not registered here");
  *last = --it->second.refs == 0;
  if (*last) {
    if (released != nullptr) *released = it->second;
    by_handle_.erase(it);
  }
  return OkStatus();
}

}  // namespace weft
