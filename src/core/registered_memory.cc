// Registered buffers and the per-call zero-copy agreement (see registered_memory.h).
#include "core/registered_memory.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "common/log.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "transports/shm/shm_allocation.h"

namespace weft {
namespace {

// What each rank contributes to a registration's key exchange.
struct KeyRecord {
  uint32_t shareable = 0;  // the buffer lies in memory peers can map (weftMemAlloc)
  uint32_t key_bytes = 0;
  uint64_t bytes = 0;      // the registered size, for the peers' bounds checks
  char key[112] = {};
};

// What each rank publishes per zero-copy candidate call (DirectTransport::PublishCallInfo).
struct CallRecord {
  uint32_t ok = 0;  // both buffers lie in live, usable registrations
  uint32_t input_reg = 0, output_reg = 0;
  uint32_t pad = 0;
  uint64_t input_offset = 0, output_offset = 0;
};
static_assert(sizeof(CallRecord) <= DirectTransport::kCallInfoBytes, "call record size");

// This rank's key for the registration, packed for the exchange (not shareable: no key).
KeyRecord PackMine(weftComm* comm, CommRegistration* reg) {
  KeyRecord mine;
  mine.bytes = reg->bytes;
  SharedAllocation a;
  if (comm->direct == nullptr || !FindSharedAllocation(reg->begin, reg->bytes, &a)) return mine;
  reg->allocation_id = a.id;
  StatusOr<RegHandle> h = comm->direct->Register(MemRef{reg->begin, reg->bytes, MemKind::kHost, -1, 0});
  if (!h.ok()) return mine;
  reg->direct_handle = *h;
  StatusOr<std::string> packed = comm->direct->PackRemoteKey(*h);
  if (!packed.ok() || packed->size() > sizeof(mine.key)) return mine;
  mine.shareable = 1;
  mine.key_bytes = static_cast<uint32_t>(packed->size());
  std::memcpy(mine.key, packed->data(), packed->size());
  return mine;
}

// Imports (maps) every other rank's key; true when every one of them was mapped, i.e. this
// rank can read every peer's buffer of this registration in place.
bool ImportPeers(weftComm* comm, CommRegistration* reg, const std::vector<KeyRecord>& all) {
  bool every = true;
  reg->peer_keys.assign(comm->nranks, 0);
  for (int q = 0; q < comm->nranks; ++q) {
    if (q == comm->rank) continue;
    const KeyRecord& k = all[q];
    if (!k.shareable || comm->direct == nullptr || comm->peer_transport[q] != comm->direct) {
      every = false;
      continue;
    }
    StatusOr<Transport::RemoteKey> key =
        comm->direct->ImportRemoteKey(q, std::string(k.key, k.key_bytes));
    if (key.ok() && comm->direct->MappedRemote(q, *key, 0, k.bytes).ok()) {
      reg->peer_keys[q] = *key;
      continue;
    }
    WEFT_WARN("rank %d: weftCommRegister: rank %d's buffer cannot be mapped here (%s): calls on "
              "this registration take the staging path", comm->rank, q,
              key.ok() ? "mapping check failed" : key.status().message().c_str());
    every = false;
  }
  return every;
}

// The registration (live, usable) that holds [p, p + bytes), as its index; -1 when none. The
// memory must still be the allocation that was registered: one freed with weftMemFree (the
// peers still map the old pages) and reallocated at the same address is not registered.
int FindUsable(const weftComm* comm, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  const auto& entries = comm->registry.entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    const CommRegistration& r = *entries[i];
    if (!r.live || !r.usable || c < r.begin || bytes > r.bytes ||
        static_cast<size_t>(c - r.begin) > r.bytes - bytes)
      continue;
    SharedAllocation a;
    if (FindSharedAllocation(p, bytes, &a) && a.id == r.allocation_id) return static_cast<int>(i);
  }
  return -1;
}

std::string HandleName(const void* handle) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%p", handle);
  return std::string("handle=") + buf;
}

}  // namespace

Status RegisterBuffer(weftComm* comm, void* buff, size_t size, void** handle) {
  auto reg = std::make_unique<CommRegistration>();
  reg->begin = static_cast<char*>(buff);
  reg->bytes = size;
  if (comm->bootstrap == nullptr || comm->nranks < 2) {
    // Thread communicators (no bootstrap) and single ranks: bookkeeping only, never read in
    // place (their direct steps read windows, and there is no peer to read).
    *handle = reg.get();
    comm->registry.entries.push_back(std::move(reg));
    return OkStatus();
  }
  // 1. every rank's key; 2. whether every rank mapped every peer's buffer.
  const KeyRecord mine = PackMine(comm, reg.get());
  std::vector<KeyRecord> all(comm->nranks);
  WEFT_RETURN_IF_ERROR(comm->bootstrap->AllGather(&mine, sizeof(mine), all.data()));
  const uint32_t mapped_all = mine.shareable && ImportPeers(comm, reg.get(), all) ? 1 : 0;
  std::vector<uint32_t> flags(comm->nranks);
  WEFT_RETURN_IF_ERROR(comm->bootstrap->AllGather(&mapped_all, sizeof(mapped_all), flags.data()));
  reg->usable = true;
  for (uint32_t f : flags) reg->usable = reg->usable && f == 1;
  comm->registry.any_usable = comm->registry.any_usable || reg->usable;
  WEFT_INFO("rank %d: weftCommRegister #%zu: %zu bytes at %p: %s", comm->rank,
            comm->registry.entries.size(), size, buff,
            reg->usable ? "every rank's buffer is mapped by its peers: zero-copy"
                        : "not every rank's buffer can be mapped (weftMemAlloc memory on one "
                          "host is needed): staging");
  *handle = reg.get();
  comm->registry.entries.push_back(std::move(reg));
  return OkStatus();
}

Status DeregisterBuffer(weftComm* comm, void* handle) {
  for (auto& e : comm->registry.entries) {
    if (e.get() != handle) continue;
    if (!e->live)
      return InvalidArgument(HandleName(handle) + " was deregistered already");
    e->live = false;
    if (e->direct_handle != 0 && comm->direct != nullptr) {
      Status st = comm->direct->Deregister(e->direct_handle);
      e->direct_handle = 0;
      WEFT_RETURN_IF_ERROR(st);
    }
    return OkStatus();
  }
  return InvalidArgument(HandleName(handle) +
                         " is not a registration of this communicator (weftCommRegister)");
}

bool ZeroCopyCandidate(const weftComm* comm, const ZeroCopyCall& call) {
  if (!comm->registry.any_usable || comm->direct == nullptr) return false;
  if (call.collective != Collective::kAllReduce && call.collective != Collective::kAllGather &&
      call.collective != Collective::kReduceScatter && call.collective != Collective::kAllToAll)
    return false;
  return std::max(call.input_bytes, call.output_bytes) >= kZeroCopyMinBytes;
}

StatusOr<bool> AgreeZeroCopy(weftComm* comm, const ZeroCopyCall& call,
                             const std::function<Status()>& signal_round) {
  CommRegistry& reg = comm->registry;
  CallRecord mine;
  const int in = FindUsable(comm, call.input, call.input_bytes);
  const int out = FindUsable(comm, call.output, call.output_bytes);
  // An all-to-all in place cannot be read in place (its blocks must be staged).
  const bool placement_ok = call.collective != Collective::kAllToAll || call.disjoint;
  if (in >= 0 && out >= 0 && placement_ok) {
    mine.ok = 1;
    mine.input_reg = static_cast<uint32_t>(in);
    mine.output_reg = static_cast<uint32_t>(out);
    mine.input_offset = static_cast<const char*>(call.input) - reg.entries[in]->begin;
    mine.output_offset = static_cast<const char*>(call.output) - reg.entries[out]->begin;
  }
  const uint64_t seq = ++reg.agreements;
  WEFT_RETURN_IF_ERROR(comm->direct->PublishCallInfo(seq, &mine, sizeof(mine)));
  WEFT_RETURN_IF_ERROR(signal_round());
  std::vector<CallRecord> theirs(comm->nranks);
  bool every = mine.ok == 1;
  for (int q = 0; q < comm->nranks; ++q) {
    if (q == comm->rank) continue;
    WEFT_RETURN_IF_ERROR(comm->direct->PeerCallInfo(q, seq, &theirs[q], sizeof(CallRecord)));
    every = every && theirs[q].ok == 1;
  }
  if (!every) return false;
  // Every rank reads in place: where each peer's buffers are mapped here.
  reg.peer_buffers.assign(comm->nranks, PeerUserBuffers{});
  for (int q = 0; q < comm->nranks; ++q) {
    if (q == comm->rank) continue;
    const CallRecord& t = theirs[q];
    if (t.input_reg >= reg.entries.size() || t.output_reg >= reg.entries.size())
      return InternalError("zero-copy: rank " + std::to_string(q) + " names registration " +
                           std::to_string(std::max(t.input_reg, t.output_reg)) + " of " +
                           std::to_string(reg.entries.size()) + " (registrations out of step)");
    StatusOr<MemRef> i = comm->direct->MappedRemote(
        q, reg.entries[t.input_reg]->peer_keys[q], t.input_offset, call.input_bytes);
    StatusOr<MemRef> o = comm->direct->MappedRemote(
        q, reg.entries[t.output_reg]->peer_keys[q], t.output_offset, call.output_bytes);
    if (!i.ok()) return i.status().WithContext("zero-copy: rank " + std::to_string(q) + "'s input");
    if (!o.ok()) return o.status().WithContext("zero-copy: rank " + std::to_string(q) + "'s output");
    reg.peer_buffers[q] = PeerUserBuffers{*i, *o};
  }
  return true;
}

}  // namespace weft
