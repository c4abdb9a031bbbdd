// Call checks: detecting ranks that run different calls (issue 11, defect 1).
//
// Two levels:
//  - Always on, free: a 32-bit descriptor hash of the call (collective, count, dtype, op, root,
//    algorithm) goes into the high half of every message tag and of the first signal of a
//    direct schedule to each peer (transports/transport.h: MakeCallTag). Transports already
//    compare tags, so a mismatch fails the receiving rank instead of corrupting its data; the
//    failing rank aborts its transports, so its peers fail too instead of hanging.
//  - WEFT_CHECK=1: before each collective every rank allgathers a full fingerprint of its call
//    and compares; a difference fails the call on every rank with a message naming each
//    rank's call (like PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL). Costs one small allgather
//    per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "common/status.h"
#include "weft/weft.h"

namespace weft {

// What ranks must agree on for one collective call.
struct CallDescriptor {
  Collective collective = Collective::kAllReduce;
  uint64_t count = 0;  // alltoallv: 0 (per-peer counts are checked by the count exchange)
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;  // only meaningful for reductions (0 otherwise)
  int root = 0;              // only meaningful for rooted collectives (0 otherwise)
  std::string algorithm;
};

// Builds the descriptor, zeroing fields the collective ignores (so e.g. a broadcast's op
// argument, which the API does not take, never causes a false mismatch).
CallDescriptor MakeCallDescriptor(Collective c, uint64_t count, weftDataType_t dtype,
                                  weftRedOp_t op, int root, const std::string& algorithm);
// Hash of the call's shape (collective, count, root, algorithm): computed once per plan.
uint32_t HashCallShape(const CallDescriptor& d);
// Mixes dtype and op into a shape hash (per call: a few multiplies); never 0. The op is
// ignored for collectives that take none.
inline uint32_t MixCallType(uint32_t shape, Collective c, weftDataType_t dtype, weftRedOp_t op) {
  bool takes_op = c == Collective::kAllReduce || c == Collective::kReduceScatter ||
                  c == Collective::kReduce ||
                  c == Collective::kReduceScatterV;
  uint32_t h = (shape ^ static_cast<uint32_t>(dtype)) * 16777619u;
  h = (h ^ (takes_op ? static_cast<uint32_t>(op) + 1 : 0u)) * 16777619u;
  return h == 0 ? 1 : h;
}
// The full hash: MixCallType(HashCallShape(d), ...).
uint32_t HashCallDescriptor(const CallDescriptor& d);
// "allreduce(count=1000, dtype=float32, op=sum, algorithm=oneshot)".
std::string DescribeCall(const CallDescriptor& d);

// Rooted collectives (broadcast, reduce) whose ranks disagree on the root: each "root" can
// complete without reading any message of the others (a broadcast root receives nothing), so
// the descriptor hash in the tags never meets a check and every rank returns success with
// inconsistent data. This appends to `rank`'s steps a zero-byte token to its ring successor
// and one from its predecessor, on their own channel and tagged like the call's data: around
// the ring some neighbours disagree whenever any rank does, and that receiver fails with a
// mismatch at once. Costs one zero-byte message per rank; a no-op for other collectives and
// for one rank.
constexpr uint16_t kRootAgreementChannel = 4000;  // above any schedule's channels, below ucx's cap
void AddRootAgreementToken(Collective collective, int rank, int nranks, RankSchedule* rs);

// True when a transport error is a call mismatch (transports put kTagMismatchMarker in it).
bool IsCallMismatch(const Status& st);
// Turns a transport's mismatch error into weftInvalidUsage naming this rank's call.
Status CallMismatchError(const Status& transport_error, int rank, const CallDescriptor& mine,
                         uint32_t hash);

// WEFT_CHECK fingerprints: fixed-size records exchanged between ranks.
constexpr size_t kFingerprintBytes = 96;
void EncodeFingerprint(const CallDescriptor& d, uint64_t seq, unsigned char out[kFingerprintBytes]);
// Compares every rank's record (nranks x kFingerprintBytes) with this rank's; returns
// weftInvalidUsage naming each differing rank's call next to this rank's.
Status CompareFingerprints(const unsigned char* all, int nranks, int rank);
// WEFT_CHECK=1 in the environment (read at communicator creation).
bool CallCheckFromEnv();

}  // namespace weft
