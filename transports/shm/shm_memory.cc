// ShmTransport's registered memory and one-sided Put/Get (see shm_memory.h).
#include "transports/shm/shm_memory.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "transports/shm/shm_allocation.h"
#include "transports/shm/shm_layout.h"
#include "transports/shm/shm_transport.h"

namespace weft {

using shm_detail::PackedRemoteKey;

namespace {
// Maps the shareable allocation a peer's key names: its memory file, opened through the
// owner's /proc entry (same user; works where cross-memory attach is refused by Yama).
StatusOr<std::shared_ptr<void>> MapPeerMemory(int peer, const PackedRemoteKey& k) {
  const std::string path = "/proc/" + std::to_string(k.pid) + "/fd/" + std::to_string(k.mem_fd);
  const std::string who = "shm import key of rank " + std::to_string(peer) + ": " + path;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return SystemError(who + ": " + strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || static_cast<uint64_t>(sb.st_size) < k.mem_bytes ||
      k.mem_offset > k.mem_bytes || k.bytes > k.mem_bytes - k.mem_offset) {
    close(fd);
    return InvalidArgument(who + ": not the " + std::to_string(k.mem_bytes) +
                           "-byte memory the key names (the allocation was freed?)");
  }
  // Page tables filled now (registration is setup), not by faults inside the first call.
  void* p = mmap(nullptr, k.mem_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int e = errno;
  close(fd);  // the mapping keeps the memory
  if (p == MAP_FAILED) return SystemError(who + ": mmap: " + strerror(e));
  const size_t bytes = k.mem_bytes;
  return std::shared_ptr<void>(p, [bytes](void* q) { munmap(q, bytes); });
}
}  // namespace

StatusOr<RegHandle> ShmTransport::Register(const MemRef& mem) {
  std::lock_guard<std::mutex> lock(mu_);
  WEFT_RETURN_IF_ERROR(RegistrationCache::Validate(mem, "shm register"));
  if (!mem.is_host())
    return InvalidArgument(std::string("shm register: ") + MemKindName(mem.kind) +
                           " memory cannot be reached through shared memory");
  if (const RegistrationCache::Entry* e = registrations_.Acquire(mem)) return e->handle;
  // transport_data: 1 + the window generation when the range lies inside the current window.
  uint64_t in_window = 0;
  const char* w = static_cast<const char*>(WindowBase());
  const char* b = static_cast<const char*>(mem.ptr);
  if (w != nullptr && b >= w && b + mem.bytes <= w + window_bytes()) in_window = 1 + window_gen_;
  return registrations_.Add(mem, in_window).handle;
}

StatusOr<std::string> ShmTransport::PackRemoteKey(RegHandle handle) {
  std::lock_guard<std::mutex> lock(mu_);
  const RegistrationCache::Entry* e = registrations_.Find(handle);
  if (e == nullptr)
    return InvalidArgument("shm pack key: handle " + std::to_string(handle) + " is not registered here");
  PackedRemoteKey k{};
  k.magic = shm_detail::kRemoteKeyMagic;
  k.owner = rank_;
  k.pid = static_cast<int32_t>(getpid());
  k.address = reinterpret_cast<uint64_t>(e->begin);
  k.bytes = e->bytes;
  if (e->transport_data != 0) {
    k.in_window = 1;
    k.window_gen = e->transport_data - 1;
    k.window_offset = static_cast<uint64_t>(e->begin - static_cast<const char*>(WindowBase()));
  }
  k.mem_fd = -1;
  SharedAllocation a;
  if (FindSharedAllocation(e->begin, e->bytes, &a)) {
    k.mem_fd = a.fd;
    k.mem_id = a.id;
    k.mem_bytes = a.bytes;
    k.mem_offset = static_cast<uint64_t>(e->begin - a.base);
  }
  return std::string(reinterpret_cast<const char*>(&k), sizeof(k));
}

StatusOr<Transport::RemoteKey> ShmTransport::ImportRemoteKey(int peer, const std::string& packed) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st;
  if (Find(peer, &st) == nullptr) return st;
  PackedRemoteKey k;
  if (packed.size() != sizeof(k))
    return InvalidArgument("shm import key: " + std::to_string(packed.size()) + " bytes, expected " +
                           std::to_string(sizeof(k)) + " (not a key packed by an shm transport)");
  std::memcpy(&k, packed.data(), sizeof(k));
  if (k.magic != shm_detail::kRemoteKeyMagic || k.owner != peer)
    return InvalidArgument("shm import key for rank " + std::to_string(peer) + ": packed by rank " +
                           std::to_string(k.owner) + (k.magic != shm_detail::kRemoteKeyMagic ? " (bad magic)" : ""));
  ImportedKey key;
  key.peer = peer;
  key.pid = k.pid;
  key.address = k.address;
  key.bytes = k.bytes;
  key.in_window = k.in_window != 0;
  key.window_offset = k.window_offset;
  key.window_gen = k.window_gen;
  if (k.mem_fd >= 0) {
    StatusOr<std::shared_ptr<void>> m = MapPeerMemory(peer, k);
    if (!m.ok()) return m.status();
    key.mapping = *m;
    key.mapped = static_cast<const char*>(key.mapping.get()) + k.mem_offset;
  }
  imported_.push_back(key);
  return static_cast<RemoteKey>(imported_.size());
}

Status ShmTransport::PostPut(int peer, const MemRef& src, RemoteKey dst, size_t offset,
                             TransportRequest* req) {
  return OneSidedCopy(true, peer, src, dst, offset, req);
}

Status ShmTransport::PostGet(int peer, const MemRef& dst, RemoteKey src, size_t offset,
                             TransportRequest* req) {
  return OneSidedCopy(false, peer, dst, src, offset, req);
}

namespace {
// process_vm_writev/readv until everything moved (they may stop short at a page boundary).
Status CrossMemoryCopy(bool put, pid_t pid, char* local, uint64_t remote, size_t bytes, const std::string& who) {
  size_t done = 0;
  while (done < bytes) {
    iovec l = {local + done, bytes - done};
    iovec r = {reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t n = put ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      return SystemError(who + ": " + (put ? "process_vm_writev" : "process_vm_readv") + ": " + strerror(e) +
                         (e == EPERM ? " (cross-memory attach refused here: register memory inside the "
                                       "shm window instead)"
                                     : ""));
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}
}  // namespace

Status ShmTransport::OneSidedCopy(bool put, int peer, const MemRef& local, RemoteKey key, size_t offset,
                                  TransportRequest* req) {
  const std::string who = std::string("shm ") + (put ? "put to" : "get from") + " rank " + std::to_string(peer);
  if (req == nullptr) return InvalidArgument(who + ": req is NULL");
  if (!local.is_host()) return InvalidArgument(who + ": local buffer is " + MemKindName(local.kind) + " memory");
  if (local.bytes > 0 && local.ptr == nullptr) return InvalidArgument(who + ": local ptr is NULL");
  std::lock_guard<std::mutex> lock(mu_);
  Status st;
  if (Find(peer, &st) == nullptr) return st;
  if (key == 0 || key > imported_.size() || imported_[key - 1].peer != peer)
    return InvalidArgument(who + ": remote key " + std::to_string(key) + " was not imported for this peer");
  const ImportedKey& k = imported_[key - 1];
  if (offset > k.bytes || local.bytes > k.bytes - offset)
    return InvalidArgument(who + ": offset " + std::to_string(offset) + " + " + std::to_string(local.bytes) +
                           " bytes is outside its registered " + std::to_string(k.bytes) + " bytes");
  req->Reset();
  char* mine = static_cast<char*>(local.ptr);
  if (local.bytes > 0 && k.mapped != nullptr) {
    char* theirs = const_cast<char*>(k.mapped) + offset;
    std::memcpy(put ? theirs : mine, put ? mine : theirs, local.bytes);
  } else if (local.bytes > 0 && k.in_window) {
    Peer& p = peers_[local_of_rank_[peer]];
    if (p.header->window_gen.load(std::memory_order_acquire) != k.window_gen)
      return InvalidUsage(who + ": its window grew since the memory was registered (the key is stale)");
    StatusOr<const void*> w = PeerWindowLocked(peer, k.window_offset + k.bytes);
    if (!w.ok()) return w.status();
    char* theirs = const_cast<char*>(static_cast<const char*>(*w)) + k.window_offset + offset;
    std::memcpy(put ? theirs : mine, put ? mine : theirs, local.bytes);
  } else if (local.bytes > 0) {
    WEFT_RETURN_IF_ERROR(CrossMemoryCopy(put, k.pid, mine, k.address + offset, local.bytes, who));
  }
  req->bytes = local.bytes;
  req->Complete();
  return OkStatus();
}

Status ShmTransport::ReleaseRemoteKey(int peer, RemoteKey key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (key == 0 || key > imported_.size() || imported_[key - 1].peer != peer)
    return InvalidArgument("shm release key: remote key " + std::to_string(key) +
                           " was not imported for rank " + std::to_string(peer));
  ImportedKey& k = imported_[key - 1];
  k.mapping.reset();
  k.mapped = nullptr;
  k.bytes = 0;  // later Put/Get through it fail as out of range
  return OkStatus();
}

StatusOr<MemRef> ShmTransport::MappedRemote(int peer, RemoteKey key, size_t offset, size_t bytes) {
  // The owner thread's hot path (once per peer per zero-copy call): no lock, as the imported
  // keys change only under the same thread's Import/Release calls.
  if (key == 0 || key > imported_.size() || imported_[key - 1].peer != peer)
    return InvalidArgument("shm: remote key " + std::to_string(key) + " was not imported for rank " +
                           std::to_string(peer));
  const ImportedKey& k = imported_[key - 1];
  if (k.mapped == nullptr)
    return InvalidUsage("shm: rank " + std::to_string(peer) +
                        "'s registered memory is not mapped here (not from weftMemAlloc)");
  if (offset > k.bytes || bytes > k.bytes - offset)
    return InvalidArgument("shm: rank " + std::to_string(peer) + "'s bytes [" + std::to_string(offset) +
                           ", +" + std::to_string(bytes) + ") leave its registered " +
                           std::to_string(k.bytes) + " bytes");
  return MemRef{const_cast<char*>(reinterpret_cast<const char*>(k.mapped)) + offset, bytes,
                MemKind::kHostShared, -1, 0};
}

Status ShmTransport::PublishCallInfo(uint64_t seq, const void* info, size_t bytes) {
  if (bytes > sizeof(header_->call_info[0].data))
    return InvalidArgument("shm call record of " + std::to_string(bytes) + " bytes is too large");
  if (header_ == nullptr) return InvalidUsage("shm: no control segment (no local peers)");
  auto& slot = header_->call_info[seq & 1];
  std::memcpy(slot.data, info, bytes);
  slot.seq.store(seq, std::memory_order_release);
  return OkStatus();
}

Status ShmTransport::PeerCallInfo(int peer, uint64_t seq, void* info, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Status st;
  Peer* p = Find(peer, &st);
  if (p == nullptr) return st;
  if (p->header == nullptr || bytes > sizeof(p->header->call_info[0].data))
    return InvalidArgument("shm: no call record of " + std::to_string(bytes) + " bytes from rank " +
                           std::to_string(peer));
  const auto& slot = p->header->call_info[seq & 1];
  const uint64_t got = slot.seq.load(std::memory_order_acquire);
  if (got != seq)
    return InternalError("shm: rank " + std::to_string(peer) + " published the record of its call " +
                         std::to_string(got) + ", this rank expected call " + std::to_string(seq) +
                         " [" + kTagMismatchMarker + "]");
  std::memcpy(info, slot.data, bytes);
  return OkStatus();
}

}  // namespace weft
