// Algorithm registry storage (see registry.h).
#include "algorithms/registry.h"

#include "algorithms/step_table.h"

#include <iterator>
#include <map>
#include <mutex>

namespace weft {
namespace {
std::vector<AlgorithmInfo>& Registry() {
  static std::vector<AlgorithmInfo> registry;  // function-local: safe from init-order issues
  return registry;
}
std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
}  // namespace

bool RegisterAlgorithm(AlgorithmInfo info) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().push_back(std::move(info));
  return true;
}

namespace {
// Whether a step of these semantics reads its local region `which` (kSrc or kDst): as an
// operand of its combine (a finalize reads the dst it rewrites), as a reduction's
// accumulator, or as the message it sends.
bool ReadsOperand(const StepSemantics& m, StepOperand which) {
  const bool flag = which == StepOperand::kSrc ? m.reads_src : m.reads_dst;
  return flag || m.lhs == which || m.rhs == which || m.sends == which;
}

// Fills rs.final_output_write by one backward pass over the steps, keeping the Output ranges
// later steps read as a set of disjoint [lo, hi) intervals (element offsets).
void MarkFinalOutputWrites(RankSchedule& rs) {
  std::map<size_t, size_t> read_later;  // lo -> hi
  auto overlaps = [&](const Region& r) {
    auto it = read_later.upper_bound(r.offset);
    if (it != read_later.begin() && std::prev(it)->second > r.offset) return true;
    return it != read_later.end() && it->first < r.offset + r.count;
  };
  auto add = [&](const Region& r) {
    if (r.buffer != Buffer::kOutput || r.count == 0) return;
    size_t lo = r.offset, hi = r.offset + r.count;
    auto it = read_later.upper_bound(lo);
    if (it != read_later.begin() && std::prev(it)->second >= lo) --it;
    while (it != read_later.end() && it->first <= hi) {  // merge what touches [lo, hi)
      lo = std::min(lo, it->first);
      hi = std::max(hi, it->second);
      it = read_later.erase(it);
    }
    read_later.emplace(lo, hi);
  };
  rs.final_output_write.assign(rs.steps.size(), 0);
  for (size_t i = rs.steps.size(); i-- > 0;) {
    const Step& st = rs.steps[i];
    const StepSemantics& m = SemanticsOf(st.op);
    if (m.writes_dst && st.dst.buffer == Buffer::kOutput && st.dst.count > 0 && !overlaps(st.dst))
      rs.final_output_write[i] = 1;
    if (ReadsOperand(m, StepOperand::kSrc)) add(st.src);
    if (ReadsOperand(m, StepOperand::kDst)) add(st.dst);
  }
}
}  // namespace

StatusOr<Schedule> BuildSchedule(const AlgorithmInfo& algorithm, const ScheduleRequest& request,
                                 BuildStats* stats) {
  const PlanScope scope = request.scope;
  if (!scope.all() && scope.rank >= request.nranks)
    return InvalidArgument("plan scope rank " + std::to_string(scope.rank) + " outside [0, " +
                           std::to_string(request.nranks) + ")");
  StatusOr<Schedule> built = algorithm.build(request);
  if (!built.ok()) return built;
  Schedule& s = built.value();
  if (stats != nullptr) {
    stats->emitted_steps = 0;
    for (const RankSchedule& rs : s.ranks) stats->emitted_steps += rs.steps.size();
  }
  if (!scope.all()) {
    // A generator that built every rank (a composition) is trimmed to the scope; for one that
    // honoured it the other entries are empty already and this costs O(p).
    for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r)
      if (r != scope.rank) s.ranks[r] = RankSchedule();
  }
  s.scope = scope;
  for (RankSchedule& rs : s.ranks) {  // the executor's per-call questions, answered once
    rs.direct_steps = 0;
    for (const Step& st : rs.steps)
      if (SemanticsOf(st.op).needs_direct) rs.direct_steps = 1;
    if (!scope.all() && !rs.steps.empty()) MarkFinalOutputWrites(rs);
  }
  return built;
}

const std::vector<AlgorithmInfo>& AllAlgorithms() { return Registry(); }

const AlgorithmInfo* FindAlgorithm(Collective collective, const std::string& name) {
  for (const AlgorithmInfo& a : Registry())
    if (a.collective == collective && a.name == name) return &a;
  return nullptr;
}

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kAllGather: return "allgather";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kAllToAllv: return "alltoallv";
    case Collective::kSendRecv: return "sendrecv";
    case Collective::kBarrier: return "barrier";
    case Collective::kAllGatherV: return "allgatherv";
    case Collective::kReduceScatterV: return "reducescatterv";
  }
  return "unknown";
}

// The step table holds every op's name with the rest of its semantics (one place to add an op).
const char* StepOpName(StepOp op) { return SemanticsOf(op).name; }

}  // namespace weft
