// Call checks (see call_check.h): descriptor hashes for message tags, mismatch messages, and
// the WEFT_CHECK fingerprint records.
#include "core/call_check.h"

#include <cstdlib>
#include <cstring>

#include "kernels/dtype.h"
#include "transports/transport.h"
#include "common/settings.h"

namespace weft {
namespace {

bool TakesOp(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce ||
         c == Collective::kReduceScatterV;
}
bool TakesRoot(Collective c) { return c == Collective::kBroadcast || c == Collective::kReduce; }

// FNV-1a, 32-bit: the descriptor is hashed once per new call shape (cached with the plan) or
// once per call for the dtype/op part; a few dozen bytes.
uint32_t Fnv1a(uint32_t h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

constexpr uint32_t kFingerprintMagic = 0x77636b31;  // "wck1"
constexpr size_t kAlgoNameBytes = 48;

struct FingerprintRecord {  // little-endian host layout; all ranks run the same build
  uint32_t magic;
  uint8_t collective;
  uint8_t pad[3];
  uint64_t seq;
  uint64_t count;
  int32_t dtype;
  int32_t op;
  int32_t root;
  uint32_t pad2;
  char algorithm[kAlgoNameBytes];
};
static_assert(sizeof(FingerprintRecord) <= kFingerprintBytes, "fingerprint record too large");

CallDescriptor Decode(const FingerprintRecord& r) {
  CallDescriptor d;
  d.collective = static_cast<Collective>(r.collective);
  d.count = r.count;
  d.dtype = static_cast<weftDataType_t>(r.dtype);
  d.op = static_cast<weftRedOp_t>(r.op);
  d.root = r.root;
  d.algorithm.assign(r.algorithm, strnlen(r.algorithm, kAlgoNameBytes));
  return d;
}

bool SameCall(const FingerprintRecord& a, const FingerprintRecord& b) {
  return a.collective == b.collective && a.seq == b.seq && a.count == b.count &&
         a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
         std::strncmp(a.algorithm, b.algorithm, kAlgoNameBytes) == 0;
}

}  // namespace

CallDescriptor MakeCallDescriptor(Collective c, uint64_t count, weftDataType_t dtype,
                                  weftRedOp_t op, int root, const std::string& algorithm) {
  CallDescriptor d;
  d.collective = c;
  d.count = count;
  d.dtype = dtype;
  d.op = TakesOp(c) ? op : static_cast<weftRedOp_t>(0);
  d.root = TakesRoot(c) ? root : 0;
  d.algorithm = algorithm;
  return d;
}

uint32_t HashCallShape(const CallDescriptor& d) {
  uint32_t h = 2166136261u;
  uint8_t c = static_cast<uint8_t>(d.collective);
  int32_t root = d.root;
  h = Fnv1a(h, &c, 1);
  h = Fnv1a(h, &d.count, sizeof(d.count));
  h = Fnv1a(h, &root, sizeof(root));
  return Fnv1a(h, d.algorithm.data(), d.algorithm.size());
}

uint32_t HashCallDescriptor(const CallDescriptor& d) {
  return MixCallType(HashCallShape(d), d.collective, d.dtype, d.op);
}

std::string DescribeCall(const CallDescriptor& d) {
  std::string s = std::string(CollectiveName(d.collective)) + "(count=" + std::to_string(d.count) +
                  ", dtype=" + DataTypeName(d.dtype);
  if (TakesOp(d.collective)) s += std::string(", op=") + RedOpName(d.op);
  if (TakesRoot(d.collective)) s += ", root=" + std::to_string(d.root);
  return s + ", algorithm=" + (d.algorithm.empty() ? "?" : d.algorithm) + ")";
}

bool IsCallMismatch(const Status& st) {
  return !st.ok() && st.message().find(kTagMismatchMarker) != std::string::npos;
}

Status CallMismatchError(const Status& transport_error, int rank, const CallDescriptor& mine,
                         uint32_t hash) {
  char h[16];
  snprintf(h, sizeof(h), "%08x", hash);
  return InvalidUsage(transport_error.message() + ". Rank " + std::to_string(rank) + " called " +
                      DescribeCall(mine) + " (descriptor " + h +
                      "); set WEFT_CHECK=1 on every rank to have each rank's call named");
}

void EncodeFingerprint(const CallDescriptor& d, uint64_t seq, unsigned char out[kFingerprintBytes]) {
  FingerprintRecord r;
  std::memset(&r, 0, sizeof(r));
  r.magic = kFingerprintMagic;
  r.collective = static_cast<uint8_t>(d.collective);
  r.seq = seq;
  r.count = d.count;
  r.dtype = d.dtype;
  r.op = d.op;
  r.root = d.root;
  std::strncpy(r.algorithm, d.algorithm.c_str(), kAlgoNameBytes - 1);
  std::memset(out, 0, kFingerprintBytes);
  std::memcpy(out, &r, sizeof(r));
}

Status CompareFingerprints(const unsigned char* all, int nranks, int rank) {
  FingerprintRecord mine;
  std::memcpy(&mine, all + static_cast<size_t>(rank) * kFingerprintBytes, sizeof(mine));
  std::string diffs;
  int ndiff = 0;
  for (int r = 0; r < nranks; ++r) {
    FingerprintRecord other;
    std::memcpy(&other, all + static_cast<size_t>(r) * kFingerprintBytes, sizeof(other));
    if (other.magic != kFingerprintMagic) {
      diffs += "; rank " + std::to_string(r) + " sent no valid fingerprint (is WEFT_CHECK=1 set there?)";
      ++ndiff;
      continue;
    }
    if (SameCall(mine, other)) continue;
    if (++ndiff <= 8)
      diffs += "; rank " + std::to_string(r) + " called " + DescribeCall(Decode(other)) +
               " as call #" + std::to_string(other.seq);
  }
  if (ndiff == 0) return OkStatus();
  if (ndiff > 8) diffs += "; ... (" + std::to_string(ndiff) + " ranks differ)";
  return InvalidUsage("WEFT_CHECK: ranks called different collectives: rank " +
                      std::to_string(rank) + " called " + DescribeCall(Decode(mine)) +
                      " as call #" + std::to_string(mine.seq) + diffs);
}

bool CallCheckFromEnv() { return SettingFlagOr("WEFT_CHECK", false); }

void AddRootAgreementToken(Collective collective, int rank, int nranks, RankSchedule* rs) {
  if (nranks < 2) return;
  if (collective != Collective::kBroadcast && collective != Collective::kReduce) return;
  // Last, so that the algorithm's steps keep their numbers (timeouts name them); with the
  // executor's window the token is still posted while the data moves.
  rs->steps.push_back(SendStep((rank + 1) % nranks, In(0, 0), kRootAgreementChannel));
  rs->steps.push_back(RecvStep((rank + nranks - 1) % nranks, Out(0, 0), kRootAgreementChannel));
  if (!rs->final_output_write.empty()) rs->final_output_write.resize(rs->steps.size(), 0);
}

}  // namespace weft
