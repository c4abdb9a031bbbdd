#include "core/device_staging.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "kernels/dtype.h"

namespace weft {
namespace {

using device::DeviceRuntime;

// One buffer of a call: where it is, how many bytes the call may touch, and whether the call
// reads it (its bytes must be copied in) or writes it (copied back). A receive buffer the call
// overwrites whole is written only; one it may leave partly alone (all-to-allv's gaps) is read
// too, so that the copy back restores what it had.
struct Extent {
  char* ptr;
  size_t bytes;
  bool read;
  bool written;
};

size_t AllToAllvExtent(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t end = 0;
  for (size_t i = 0; i < counts.size() && i < displs.size(); ++i)
    if (counts[i] > 0) end = std::max(end, displs[i] + counts[i]);
  return end;
}

void AddExtents(const CollectiveCall& c, int nranks, int rank, std::vector<Extent>* out) {
  const size_t elem = TypeSize(c.dtype);
  const size_t n = static_cast<size_t>(nranks);
  size_t send = c.count, recv = c.count;
  switch (c.collective) {
    case Collective::kAllGather: recv = n * c.count; break;
    case Collective::kReduceScatter: send = n * c.count; break;
    case Collective::kAllToAll: send = recv = n * c.count; break;
    case Collective::kAllToAllv:
      send = AllToAllvExtent(c.sendcounts, c.sdispls);
      recv = AllToAllvExtent(c.recvcounts, c.rdispls);
      break;
    case Collective::kAllGatherV: recv = AllToAllvExtent(c.recvcounts, c.rdispls); break;
    case Collective::kReduceScatterV:
      send = 0;
      for (size_t x : c.recvcounts) send += x;  // checked at the API: no wrap-around
      break;
    case Collective::kBarrier: return;
    default: break;
  }
  out->push_back({static_cast<char*>(const_cast<void*>(c.sendbuff)), send * elem, true, false});
  // reduce writes only the root's receive buffer; all-to-allv may leave gaps in it.
  if (c.collective == Collective::kReduce && rank != c.root) return;
  out->push_back({static_cast<char*>(c.recvbuff), recv * elem,
                  c.collective == Collective::kAllToAllv || c.collective == Collective::kAllGatherV,
                  true});
}

std::vector<Extent> ExtentsOf(const DeviceOps& ops, int nranks, int rank) {
  std::vector<Extent> all;
  for (const auto& op : ops) {
    if (const auto* p = std::get_if<P2POp>(&op)) {
      all.push_back({static_cast<char*>(p->buff), p->count * TypeSize(p->dtype), p->is_send, !p->is_send});
    } else {
      AddExtents(std::get<CollectiveCall>(op), nranks, rank, &all);
    }
  }
  return all;
}

// Device extents merged where they overlap, laid out from *offset on (advanced past them).
std::vector<StagedRegion> PlanRegions(std::vector<Extent> extents, const DeviceRuntime& rt,
                                      size_t* offset) {
  extents.erase(std::remove_if(extents.begin(), extents.end(),
                               [&](const Extent& e) {
                                 return e.ptr == nullptr || e.bytes == 0 ||
                                        !rt.PointerInfo(e.ptr).is_device;
                               }),
                extents.end());
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.ptr < b.ptr; });
  std::vector<StagedRegion> regions;
  for (const Extent& e : extents) {
    if (!regions.empty() && e.ptr < regions.back().dev + regions.back().bytes) {
      StagedRegion& r = regions.back();
      r.bytes = std::max(r.bytes, static_cast<size_t>(e.ptr + e.bytes - r.dev));
      r.read = r.read || e.read;
      r.written = r.written || e.written;
    } else {
      regions.push_back({e.ptr, e.bytes, e.read, e.written, 0});
    }
  }
  for (StagedRegion& r : regions) {
    r.staging_offset = *offset;
    *offset += (r.bytes + 63) / 64 * 64;
  }
  return regions;
}

// A lone allreduce, reduce or broadcast larger than a chunk becomes one call per chunk: they
// are element-wise, so chunks are independent calls with the same result.
std::vector<DeviceOps> Split(DeviceOps ops) {
  std::vector<DeviceOps> pieces;
  const auto* c = ops.size() == 1 ? std::get_if<CollectiveCall>(&ops[0]) : nullptr;
  const bool splittable = c != nullptr && (c->collective == Collective::kAllReduce ||
                                           c->collective == Collective::kReduce ||
                                           c->collective == Collective::kBroadcast);
  const size_t elem = c != nullptr ? TypeSize(c->dtype) : 0;
  const size_t bytes = c != nullptr ? c->count * elem : 0;
  if (!splittable || elem == 0 || bytes < 2 * kDeviceChunkMinBytes) {
    pieces.push_back(std::move(ops));
    return pieces;
  }
  const size_t chunk = std::max(kDeviceChunkMinBytes, (bytes + kDevicePieces - 1) / kDevicePieces);
  const size_t per_chunk = (chunk + elem - 1) / elem;
  for (size_t first = 0; first < c->count; first += per_chunk) {
    CollectiveCall part = *c;
    part.count = std::min(per_chunk, c->count - first);
    if (part.sendbuff != nullptr) part.sendbuff = static_cast<const char*>(c->sendbuff) + first * elem;
    if (part.recvbuff != nullptr) part.recvbuff = static_cast<char*>(c->recvbuff) + first * elem;
    pieces.push_back(DeviceOps{part});
  }
  return pieces;
}

// The staging address of a device pointer (unchanged for host pointers).
template <typename P>
P ToStaging(P p, const std::vector<StagedRegion>& regions, char* staging) {
  const char* c = static_cast<const char*>(p);
  for (const StagedRegion& r : regions)
    if (c >= r.dev && c < r.dev + r.bytes)
      return static_cast<P>(static_cast<void*>(staging + r.staging_offset + (c - r.dev)));
  return p;
}

// Pinned memory kept for reuse once a communicator is destroyed (TrimStaging); while jobs run
// the pool holds whatever they needed at once.
constexpr size_t kPoolBytes = size_t{256} << 20;

struct Pool {
  std::mutex mu;
  std::multimap<size_t, char*> free;
  size_t pooled = 0;
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // leaked: jobs may finish during exit
  return *pool;
}

}  // namespace

std::vector<StagedPiece> PlanPieces(DeviceOps ops, int nranks, int rank, const DeviceRuntime& rt,
                                    size_t* staging_bytes) {
  std::vector<StagedPiece> pieces;
  size_t offset = kStagingFlagBytes;
  for (DeviceOps& part : Split(std::move(ops))) {
    StagedPiece piece;
    piece.regions = PlanRegions(ExtentsOf(part, nranks, rank), rt, &offset);
    piece.ops = std::move(part);
    pieces.push_back(std::move(piece));
  }
  *staging_bytes = offset;
  return pieces;
}

StagedPiece PlanHostWork(const std::vector<WorkExtent>& extents, const DeviceRuntime& rt,
                         size_t* staging_bytes) {
  std::vector<Extent> all;
  for (const WorkExtent& e : extents)
    all.push_back({static_cast<char*>(const_cast<void*>(e.ptr)), e.bytes, e.read, e.written});
  size_t offset = kStagingFlagBytes;
  StagedPiece piece;
  piece.regions = PlanRegions(std::move(all), rt, &offset);
  *staging_bytes = offset;
  return piece;
}

void* StagingAddress(const StagedPiece& piece, char* staging, const void* p) {
  return ToStaging(const_cast<void*>(p), piece.regions, staging);
}

void Retarget(std::vector<StagedPiece>* pieces, char* staging) {
  for (StagedPiece& piece : *pieces) {
    for (auto& op : piece.ops) {
      if (auto* p = std::get_if<P2POp>(&op)) {
        p->buff = ToStaging(p->buff, piece.regions, staging);
      } else {
        auto& c = std::get<CollectiveCall>(op);
        c.sendbuff = ToStaging(const_cast<void*>(c.sendbuff), piece.regions, staging);
        c.recvbuff = ToStaging(c.recvbuff, piece.regions, staging);
      }
    }
  }
}

size_t StagingSizeClass(size_t bytes) {
  size_t c = 4096;
  while (c < bytes) c <<= 1;
  return c;
}

Status GetStaging(DeviceRuntime& rt, size_t* size_class, char** block) {
  Pool& pool = ThePool();
  {
    std::lock_guard<std::mutex> l(pool.mu);
    // The smallest pooled block that fits, up to 4x larger: a sweep of growing sizes then
    // reuses what the last size pinned instead of pinning more.
    auto it = pool.free.lower_bound(*size_class);
    if (it != pool.free.end() && it->first <= 4 * *size_class) {
      *size_class = it->first;
      *block = it->second;
      pool.free.erase(it);
      pool.pooled -= *size_class;
      return OkStatus();
    }
  }
  void* p = nullptr;
  WEFT_RETURN_IF_ERROR(rt.HostAlloc(&p, *size_class));
  *block = static_cast<char*>(p);
  return OkStatus();
}

// Never frees: this runs on a progress thread, and freeing pinned memory waits for the whole
// device (cudaFreeHost), whose streams may be waiting for this very thread's next flag. The
// H100 hung so from 8 MiB allreduces, once the pool passed kPoolBytes. TrimStaging frees.
void PutStaging(size_t size_class, char* block) {
  Pool& pool = ThePool();
  std::lock_guard<std::mutex> l(pool.mu);
  pool.free.emplace(size_class, block);
  pool.pooled += size_class;
}

void TrimStaging(DeviceRuntime& rt) {
  std::vector<char*> doomed;
  {
    Pool& pool = ThePool();
    std::lock_guard<std::mutex> l(pool.mu);
    while (pool.pooled > kPoolBytes && !pool.free.empty()) {
      auto largest = std::prev(pool.free.end());
      pool.pooled -= largest->first;
      doomed.push_back(largest->second);
      pool.free.erase(largest);
    }
  }
  for (char* block : doomed) (void)rt.HostFree(block);
}

}  // namespace weft
