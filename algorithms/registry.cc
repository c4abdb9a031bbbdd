// Algorithm registry storage (see registry.h).
#include "algorithms/registry.h"

#include "algorithms/step_table.h"

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
  for (RankSchedule& rs : s.ranks) {  // the executor's per-call question, answered once
    rs.direct_steps = 0;
    for (const Step& st : rs.steps)
      if (SemanticsOf(st.op).needs_direct) rs.direct_steps = 1;
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
  }
  return "unknown";
}

// The step table holds every op's name with the rest of its semantics (one place to add an op).
const char* StepOpName(StepOp op) { return SemanticsOf(op).name; }

}  // namespace weft
