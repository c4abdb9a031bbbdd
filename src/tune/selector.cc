// Selector (see selector.h).
#include "tune/selector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "algorithms/direct_pattern.h"
#include "common/log.h"
#include "common/settings.h"
#include "tune/analytic_model.h"

namespace weft {
namespace {

constexpr size_t kChunkBytes[] = {64 << 10, 512 << 10, 4 << 20};
constexpr int kChannels[] = {1, 2, 4};

// Process-wide model decisions: thread-per-rank communicators in one process hold identical
// fabrics and would otherwise each repeat the same simulations.
std::mutex g_shared_mu;
std::map<std::string, Decision>& SharedCache() {
  static std::map<std::string, Decision> cache;
  return cache;
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

bool Rooted(Collective c) { return c == Collective::kBroadcast || c == Collective::kReduce; }

}  // namespace

Selector::Selector(std::shared_ptr<const Fabric> fabric, AlgoOverrides overrides, bool shm_enabled)
    : fabric_(std::move(fabric)), overrides_(std::move(overrides)), shm_(shm_enabled),
      fabric_digest_(fabric_->Digest()), nranks_(fabric_->nranks()),
      groups_(fabric_->HostGroups()), mappable_(fabric_->AllRanksMappable(shm_enabled)),
      groups_mappable_(fabric_->GroupsMappable(shm_enabled)),
      cores_shared_(fabric_->AnyCoreShared()) {}

Selector::Selector(int nranks, std::vector<std::vector<int>> host_groups, AlgoOverrides overrides)
    : overrides_(std::move(overrides)), shm_(false), fabric_digest_(0), nranks_(nranks),
      groups_(std::move(host_groups)), mappable_(false),
      groups_mappable_(false), cores_shared_(false) {}

size_t Selector::CallBytes(const ScheduleRequest& request, size_t elem_size) {
  return NcclBytes(request, elem_size);
}

int Selector::SizeBucket(size_t bytes) {
  if (bytes == 0) return -1;
  int b = 0;
  while (bytes >>= 1) ++b;
  return b;
}

void Selector::SetCandidatesForTesting(std::vector<AlgorithmInfo> algorithms) {
  std::lock_guard<std::mutex> lock(mu_);
  test_candidates_ = std::move(algorithms);
  use_test_candidates_ = true;
  cache_.clear();
}

void Selector::SetTuningTable(TuningTable table) {
  std::lock_guard<std::mutex> lock(mu_);
  tuning_ = std::move(table);
  tuning_loaded_ = true;
  tuning_status_ = OkStatus();
  cache_.clear();
}

Status Selector::LoadTuningOnce() {
  if (tuning_loaded_) return tuning_status_;
  tuning_loaded_ = true;
  const std::string path = SettingText("WEFT_TUNING_FILE");
  if (!path.empty()) {
    StatusOr<TuningTable> t = LoadTuningFile(path);
    if (t.ok()) tuning_ = std::move(t.value());
    else tuning_status_ = Status(weftInvalidUsage, "WEFT_TUNING_FILE=" + ShownValue(path) + ": " + t.status().message());
  }
  return tuning_status_;
}

std::vector<const AlgorithmInfo*> Selector::Algorithms(Collective c) const {
  std::vector<const AlgorithmInfo*> out;
  if (use_test_candidates_) {
    for (const AlgorithmInfo& a : test_candidates_)
      if (a.collective == c) out.push_back(&a);
  } else {
    for (const AlgorithmInfo& a : AllAlgorithms())
      if (a.collective == c) out.push_back(&a);
  }
  return out;
}

std::vector<Selector::Candidate> Selector::Grid(const AlgorithmInfo* a, size_t nccl_bytes, size_t elem) const {
  std::vector<Candidate> out;
  out.push_back(Candidate{a, ChunkPolicy{0, 1}, 0});
  // Ranks sharing cores: a direct algorithm's rounds stay as large as its window slot. Each
  // round closes with signal rounds that wait for ranks the kernel must switch in; on 4 ranks
  // over 2 cores a twoshot round cost 17-20 us more than its data (64 KiB chunks against
  // whole slots: 1.5-2x slower from 256 KiB to 64 MiB, perf/RESULTS.md session 12), which
  // the model's fluid cores price at 1-8 us and so preferred the small chunks.
  if (cores_shared_ && a->direct) return out;
  for (size_t cb : kChunkBytes) {
    if (cb >= nccl_bytes) break;  // a single chunk: same as no chunking
    for (int ch : kChannels) {
      ChunkPolicy p;
      p.chunk_elems = std::max<size_t>(1, cb / std::max<size_t>(1, elem));
      p.channels = ch;
      out.push_back(Candidate{a, p, cb});
    }
  }
  return out;
}

Selector::Evaluated Selector::Evaluate(const Candidate& c, const ScheduleRequest& req, size_t elem,
                                       double build_budget) const {
  CostOptions co;
  co.shm_enabled = shm_;
  // Unchunked schedules cannot be coarsened: they get a larger allowance, so that a 16k-rank
  // halving-doubling (1.2M steps) is still simulated; chunked ones coarsen to the budget.
  co.max_build_cost = build_budget > 0 && c.chunk.chunk_elems == 0 ? 4 * build_budget : build_budget;
  ScheduleRequest r = req;
  r.chunk = c.chunk;
  // Timed as the communicator will run it: a call that fits half the window in one round runs
  // the single-round schedule (no closing signal round).
  if (r.window_half < 0 && r.collective != Collective::kAllToAllv) AskSingleRound(*c.algorithm, &r, elem);
  StatusOr<CostEstimate> est = PredictCost(*c.algorithm, r, elem, *fabric_, co);
  Evaluated e;
  e.decision.algorithm = c.algorithm;
  e.decision.chunk = c.chunk;
  std::string shape = c.algorithm->name + " chunk=" + (c.chunk_bytes ? FormatSize(c.chunk_bytes) : std::string("none")) +
                      " channels=" + std::to_string(c.chunk.channels);
  if (!est.ok()) {
    e.decision.predicted_us = std::numeric_limits<double>::infinity();
    e.decision.why = shape + ": " + est.status().message();
    return e;
  }
  e.decision.predicted_us = est->time_us;
  e.decision.cpu_busy_us = est->analytic_only ? 0 : est->sim.cpu_busy_us;
  e.decision.isolated_us = est->analytic_only || est->sim.isolated_us <= 0 ? est->time_us : est->sim.isolated_us;
  if (est->analytic_only) {
    e.decision.why = shape + Fmt(": %.2f us analytic only (schedule too large to simulate)", est->time_us);
    return e;
  }
  simulated_++;
  e.steps = est->sim.steps;
  AnalyticEstimate a = EstimateAnalytic(*c.algorithm, r, elem, *fabric_, shm_);
  e.decision.why = shape + Fmt(": %.2f us", est->time_us) + " simulated, steps=" + std::to_string(est->sim.steps) +
                   " msgs=" + std::to_string(est->sim.messages) +
                   (est->multiplier > 1 ? Fmt(" (coarsened up to x%.0f)", est->multiplier) : std::string()) +
                   (est->sim.hottest_resource.empty() ? std::string() : " bottleneck=" + est->sim.hottest_resource) +
                   (a.known ? Fmt("; analytic %.2f us", a.time_us) : std::string("; no analytic pattern"));
  return e;
}

std::vector<const AlgorithmInfo*> Selector::Prefilter(const ScheduleRequest& req, size_t elem,
                                                      const std::vector<const AlgorithmInfo*>& algos,
                                                      std::vector<Decision>* skipped) const {
  // Analytic estimate of each algorithm: its best over the chunk grid (what stage 2 could
  // reach), so that a pipelined algorithm is not dropped for its unchunked time.
  const size_t bytes = NcclBytes(req, elem);
  struct Scored {
    const AlgorithmInfo* algorithm;
    bool known;
    double best_us;
    std::string formula;
  };
  std::vector<Scored> scored;
  for (const AlgorithmInfo* a : algos) {
    Scored sc{a, false, std::numeric_limits<double>::infinity(), ""};
    for (const Candidate& c : Grid(a, bytes, elem)) {
      ScheduleRequest r = req;
      r.chunk = c.chunk;
      AnalyticEstimate e = EstimateAnalytic(*a, r, elem, *fabric_, shm_);
      if (!e.known) break;
      sc.known = true;
      if (e.time_us < sc.best_us) { sc.best_us = e.time_us; sc.formula = e.formula; }
    }
    scored.push_back(sc);
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < scored.size(); ++i)
    if (scored[i].known) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return scored[x].best_us < scored[y].best_us; });
  std::vector<char> keep(scored.size(), 0);
  for (size_t i = 0; i < scored.size(); ++i) keep[i] = !scored[i].known;  // no pattern: simulate
  const double best = order.empty() ? 0 : scored[order[0]].best_us;
  for (size_t k = 0; k < order.size(); ++k)
    if (static_cast<int>(k) < kPrefilterMinKept || scored[order[k]].best_us <= kPrefilterFactor * best)
      keep[order[k]] = 1;
  std::vector<const AlgorithmInfo*> out;
  for (size_t i = 0; i < scored.size(); ++i) {
    if (keep[i]) {
      out.push_back(scored[i].algorithm);
      continue;
    }
    Decision d;
    d.algorithm = scored[i].algorithm;
    d.predicted_us = scored[i].best_us;
    d.why = scored[i].algorithm->name + Fmt(": analytic %.2f us", scored[i].best_us) + " (" + scored[i].formula +
            Fmt("), not simulated: over %.1fx", kPrefilterFactor) + Fmt(" the best analytic %.2f us", best);
    if (skipped) skipped->push_back(d);
  }
  return out;
}

size_t Selector::simulated_candidates() const { return simulated_.load(); }

Decision Selector::Pick(const std::vector<Decision>& evaluated) const {
  // First strictly fastest wins (candidate order is deterministic); the runner-up algorithm
  // goes into `why` so that the decision explains itself. Equal predictions (candidates all
  // held to one shaped link's rate in a back-to-back sequence of calls, as the netns tbf
  // link holds every hierarchical variant from 16 KiB) are decided by the same call alone
  // (Decision::isolated_us: what differs is the work the burst does not cover), then by the
  // CPU time the call keeps the cores busy. (Deciding by the CPU time first picked the
  // one-leader variant, measured 1.5-1.8x slower than hierarchical_direct at 128-512 KiB on
  // the 2x2 namespaces: perf/netns/CALIBRATION.md, session 7.)
  auto faster = [](const Decision& d, const Decision& best) {
    if (!std::isfinite(best.predicted_us)) return d.predicted_us < best.predicted_us;
    const double tol = 1e-9 * std::max(1.0, std::fabs(best.predicted_us));
    if (d.predicted_us < best.predicted_us - tol) return true;
    if (std::fabs(d.predicted_us - best.predicted_us) > tol) return false;
    const double itol = 1e-9 * std::max(1.0, std::fabs(best.isolated_us));
    if (d.isolated_us < best.isolated_us - itol) return true;
    return std::fabs(d.isolated_us - best.isolated_us) <= itol && d.cpu_busy_us < best.cpu_busy_us - 1e-9;
  };
  // Analytic-only rows (schedules too large to simulate) are optimistic by construction, so
  // they compete only when no candidate could be simulated.
  auto analytic_only = [](const Decision& d) { return d.why.find("analytic only") != std::string::npos; };
  bool any_simulated = false;
  for (const Decision& d : evaluated) any_simulated |= std::isfinite(d.predicted_us) && !analytic_only(d);
  Decision best;
  best.predicted_us = std::numeric_limits<double>::infinity();
  for (const Decision& d : evaluated)
    if (faster(d, best) && !(any_simulated && analytic_only(d))) best = d;
  if (!best.algorithm || !std::isfinite(best.predicted_us)) return Decision();
  const Decision* runner = nullptr;
  for (const Decision& d : evaluated)
    if (d.algorithm != best.algorithm && std::isfinite(d.predicted_us) && (!runner || d.predicted_us < runner->predicted_us))
      runner = &d;
  best.why = "model: " + best.why;
  if (runner) best.why += "; next best algorithm " + runner->algorithm->name + Fmt(" %.2f us", runner->predicted_us);
  return best;
}

Decision Selector::ModelDecision(const ScheduleRequest& req, size_t elem, const AlgorithmInfo* only,
                                 std::vector<Decision>* trace) const {
  size_t bytes = NcclBytes(req, elem);
  std::vector<const AlgorithmInfo*> algos;
  if (only) algos.push_back(only);
  else
    for (const AlgorithmInfo* a : Algorithms(req.collective))
      if (a->applicable(req)) algos.push_back(a);
  // At scale: analytic pre-filter, and every simulation under a work budget.
  const bool at_scale = req.nranks > kFullSimulationMaxRanks && !full_simulation_for_testing_;
  const double budget = at_scale ? kScaleBuildBudget : 0;
  std::vector<Decision> skipped;
  const size_t considered = algos.size();
  if (at_scale && !only) algos = Prefilter(req, elem, algos, &skipped);
  // Stage 1: every algorithm unchunked. Stage 2: the chunk x channel grid for the three
  // fastest (and any within 2x of the best), which keeps 1000-rank selection affordable; an
  // algorithm whose first chunked schedule has as many steps as its unchunked one ignores
  // the chunk policy, and its grid is skipped.
  std::vector<Decision> all;
  std::vector<Evaluated> base;
  for (const AlgorithmInfo* a : algos) {
    base.push_back(Evaluate(Candidate{a, ChunkPolicy{0, 1}, 0}, req, elem, budget));
    all.push_back(base.back().decision);
  }
  std::vector<size_t> order(base.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return base[x].decision.predicted_us < base[y].decision.predicted_us;
  });
  for (size_t k = 0; k < order.size(); ++k) {
    const Evaluated& b = base[order[k]];
    if (!std::isfinite(b.decision.predicted_us)) break;
    if (k >= 3 && b.decision.predicted_us > 2 * base[order[0]].decision.predicted_us) break;
    std::vector<Candidate> g = Grid(algos[order[k]], bytes, elem);
    for (size_t i = 1; i < g.size(); ++i) {  // [0] is the stage-1 candidate
      Evaluated e = Evaluate(g[i], req, elem, budget);
      all.push_back(e.decision);
      if (i == 1 && e.steps == b.steps) break;
      // At scale: when a second channel changed nothing (same time as one channel, as for
      // generators whose streams are not the bottleneck), skip the third for this chunk size.
      if (at_scale && g[i].chunk.channels == 2 && i + 1 < g.size() &&
          e.decision.predicted_us == all[all.size() - 2].predicted_us)
        ++i;
    }
  }
  if (trace) {
    trace->insert(trace->end(), all.begin(), all.end());
    trace->insert(trace->end(), skipped.begin(), skipped.end());
  }
  Decision d = Pick(all);
  if (d.algorithm && d.algorithm->direct && cores_shared_ && !only)
    d.why += "; unchunked: ranks share cores, so a direct algorithm's rounds stay whole window slots";
  if (d.algorithm && at_scale && !only)
    d.why += "; pre-filter simulated " + std::to_string(algos.size()) + " of " + std::to_string(considered) +
             " algorithm(s)";
  return d;
}

namespace {

// The algorithm a selector without a fabric model runs when nothing forces one: the
// bandwidth-optimal flat choice per collective (ring, chain, pairwise), as thread
// communicators always did.
const char* DefaultAlgorithmName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "ring";
    case Collective::kAllGather: return "ring";
    case Collective::kReduceScatter: return "ring";
    case Collective::kBroadcast: return "chain";
    case Collective::kReduce: return "chain";
    case Collective::kAllToAll: return "pairwise";
    case Collective::kAllToAllv: return "pairwise";
    case Collective::kBarrier: return "dissemination";
    case Collective::kAllGatherV: return "ring";
    case Collective::kReduceScatterV: return "ring";
    default: return "";
  }
}

// Pipelining without a model: chunks of WEFT_CHUNK_BYTES (default 1 MiB — large enough that
// per-message overhead (a few us) is small next to the transfer time at several GB/s, small
// enough that a 64 MiB ring pipelines over many chunks). A bad value was refused when the
// communicator was created (ValidateSettings), so the fallback here never hides one.
ChunkPolicy DefaultChunk(size_t elem_size) {
  static const size_t chunk_bytes = std::max<size_t>(1, SettingBytesOr("WEFT_CHUNK_BYTES", size_t{1} << 20));
  ChunkPolicy c;
  c.chunk_elems = std::max<size_t>(1, chunk_bytes / std::max<size_t>(1, elem_size));
  c.channels = 1;
  return c;
}

}  // namespace

StatusOr<Decision> Selector::DefaultDecision(ScheduleRequest* request, size_t elem_size, const AlgorithmInfo* only,
                                             const std::string& why_prefix) const {
  const Collective c = request->collective;
  Decision d;
  d.algorithm = only;
  d.why = why_prefix + "no fabric model: ";
  if (d.algorithm == nullptr) {
    for (const AlgorithmInfo* a : Algorithms(c))
      if (a->name == DefaultAlgorithmName(c) && a->applicable(*request)) d.algorithm = a;
    if (d.algorithm == nullptr)  // the default is missing or cannot run: first one that can
      for (const AlgorithmInfo* a : Algorithms(c))
        if (a->applicable(*request)) { d.algorithm = a; break; }
    if (d.algorithm == nullptr)
      return InternalError(std::string("selector: no registered algorithm can run ") + CollectiveName(c) +
                           " on " + std::to_string(request->nranks) + " ranks");
    d.why += "default " + d.algorithm->name;
  } else {
    d.why += d.algorithm->name;
  }
  d.chunk = DefaultChunk(elem_size);
  d.why += " with WEFT_CHUNK_BYTES chunks";
  request->chunk = d.chunk;
  return d;
}

namespace {
// The algorithm that has a zero-copy variant for the request's collective, when the request
// asks for it and it can run the call; nullptr otherwise.
const AlgorithmInfo* ZeroCopyAlgorithm(const ScheduleRequest& request) {
  if (!request.peer_buffers_mapped) return nullptr;
  const char* name = request.collective == Collective::kAllReduce       ? "twoshot"
                     : request.collective == Collective::kAllGather     ? "direct"
                     : request.collective == Collective::kReduceScatter ? "direct"
                     : request.collective == Collective::kAllToAll      ? "direct"
                                                                        : nullptr;
  const AlgorithmInfo* a = name ? FindAlgorithm(request.collective, name) : nullptr;
  return a != nullptr && a->applicable(request) ? a : nullptr;
}
}  // namespace

// What decides before the model: WEFT_ALGO (which may only narrow the model to *only),
// registered buffers' zero-copy algorithm, a tuning file's rule. True with *out when decided.
StatusOr<bool> Selector::Preempt(ScheduleRequest* request, size_t elem_size, size_t bytes,
                                 const AlgorithmInfo** only, std::string* why_prefix, Decision* out) {
  const Collective c = request->collective;
  const std::string* forced = overrides_.Lookup(c, bytes);
  if (forced) {
    for (const AlgorithmInfo* a : Algorithms(c))
      if (a->name == *forced) *only = a;
    if (!*only)
      return InvalidUsage("WEFT_ALGO forces '" + *forced + "' for " + CollectiveName(c) +
                          ", which is not a registered algorithm for it");
    if (!(*only)->applicable(*request))
      return InvalidUsage("WEFT_ALGO forces '" + *forced + "' for " + CollectiveName(c) + " of " +
                          std::to_string(bytes) + " bytes, but it cannot run this call" +
                          (request->all_ranks_mappable ? "" : " (ranks are not all mappable / on one host)"));
    *why_prefix = "WEFT_ALGO forces " + *forced + "; ";
  } else if (const AlgorithmInfo* z = ZeroCopyAlgorithm(*request)) {
    // Registered buffers every rank agreed on (ScheduleRequest::peer_buffers_mapped): the
    // zero-copy direct schedule moves the fewest bytes on one host (no staging copy), so it
    // is taken without modelling; WEFT_ALGO above still wins.
    Decision d;
    d.algorithm = z;
    d.why = "registered buffers: zero-copy " + z->name;
    request->chunk = d.chunk;
    *out = d;
    return true;
  } else {
    WEFT_RETURN_IF_ERROR(LoadTuningOnce());
    if (const TuningRule* rule = tuning_.Lookup(c, bytes)) {
      const AlgorithmInfo* a = nullptr;
      for (const AlgorithmInfo* x : Algorithms(c))
        if (x->name == rule->algorithm) a = x;
      if (!a)
        return InvalidUsage(tuning_.origin + ":" + std::to_string(rule->line) + ": algorithm '" + rule->algorithm +
                            "' is not registered for " + CollectiveName(c));
      if (a->applicable(*request)) {
        Decision d;
        d.algorithm = a;
        d.chunk.chunk_elems = rule->chunk_bytes ? std::max<size_t>(1, rule->chunk_bytes / elem_size) : 0;
        d.chunk.channels = rule->channels;
        d.predicted_us = 0;  // measured, not modelled
        d.why = "tuning file " + tuning_.origin + ":" + std::to_string(rule->line) + ": " + a->name;
        request->chunk = d.chunk;
        *out = d;
        return true;
      }
      *why_prefix = "tuning rule " + tuning_.origin + ":" + std::to_string(rule->line) + " (" + rule->algorithm +
                   ") cannot run this call; ";
    }
  }
  return false;
}

// The model's decision for the call's size bucket, cached per communicator and per process
// (fabric digest), then checked against this exact count.
StatusOr<Decision> Selector::BucketDecision(ScheduleRequest* request, size_t elem_size, size_t bytes,
                                            const AlgorithmInfo* only, const std::string& why_prefix) {
  // Model decision for the bucket, evaluated at the bucket's representative count.
  const Collective c = request->collective;
  ScheduleRequest rep = *request;
  int bucket = SizeBucket(bytes);
  std::string key = std::string(CollectiveName(c)) + "|e" + std::to_string(elem_size) + "|b" + std::to_string(bucket);
  if (Rooted(c)) key += "|root" + std::to_string(request->root);
  if (c == Collective::kAllToAllv) {
    std::string counts;
    for (size_t x : request->a2av_counts) counts += std::to_string(x) + ",";
    key += "|a2av" + std::to_string(Fnv1a(counts));  // evaluated at its own counts
  } else if (bucket >= 0) {
    size_t rep_bytes = static_cast<size_t>(std::ldexp(1.4142135623730951, bucket));
    size_t per = (c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll)
                     ? static_cast<size_t>(request->nranks) : 1;
    rep.count = std::max<size_t>(1, rep_bytes / elem_size / per);
  }
  if (only) key += "|forced=" + only->name;
  // All-to-all is decided as an out-of-place call whatever this rank's placement. Ranks may
  // differ in it (NCCL allows one rank in place and another not) and must agree on the
  // algorithm; an in-place rank runs that algorithm's in-place schedule. (Decided with the
  // rank's own placement, a bucket's first call chose for both, and mixed ranks could differ.)
  if (c == Collective::kAllToAll) rep.out_of_place = true;

  const std::string shared_key = std::to_string(fabric_digest_) + (shm_ ? "|shm|" : "|noshm|") + key;
  auto it = cache_.find(key);
  Decision d;
  bool have = false;
  if (it != cache_.end()) {
    d = it->second;
    have = true;
  } else if (!use_test_candidates_ && !full_simulation_for_testing_) {
    std::lock_guard<std::mutex> g(g_shared_mu);
    auto s = SharedCache().find(shared_key);
    if (s != SharedCache().end()) {
      d = s->second;
      have = true;
      cache_[key] = d;
    }
  }
  if (!have) {
    d = ModelDecision(rep, elem_size, only);
    if (!d.algorithm) {
      std::string known;
      for (const AlgorithmInfo* a : Algorithms(c)) known += " " + a->name;
      return InternalError(std::string("selector: no registered algorithm can run ") + CollectiveName(c) + " of " +
                           std::to_string(bytes) + " bytes on " + std::to_string(request->nranks) + " ranks (registered:" +
                           (known.empty() ? " none" : known) + ")");
    }
    d.why = why_prefix + d.why;
    cache_[key] = d;
    if (!use_test_candidates_ && !full_simulation_for_testing_) {
      std::lock_guard<std::mutex> g(g_shared_mu);
      SharedCache()[shared_key] = d;
    }
    WEFT_INFO("decision %s (%zu bytes, bucket 2^%d): %s", CollectiveName(c), bytes, bucket, d.why.c_str());
  }
  if (!d.algorithm->applicable(*request)) {
    // The bucket's choice cannot run this particular count: decide for the call itself.
    d = ModelDecision(*request, elem_size, only);
    if (!d.algorithm)
      return InternalError(std::string("selector: no registered algorithm can run ") + CollectiveName(c) + " of " +
                           std::to_string(bytes) + " bytes");
    d.why = why_prefix + d.why + " (decided for this count)";
  }
  return d;
}

StatusOr<Decision> Selector::Choose(ScheduleRequest* request, size_t elem_size) {
  if (request->nranks != nranks_)
    return InvalidArgument("selector: request nranks=" + std::to_string(request->nranks) + " but the " +
                           (fabric_ ? "fabric" : "communicator") + " has " + std::to_string(nranks_) + " ranks");
  if (elem_size == 0) return InvalidArgument("selector: elem_size=0");
  request->groups = groups_;
  request->all_ranks_mappable = mappable_;
  request->groups_mappable = groups_mappable_;
  // The call's size, computed here and nowhere else: WEFT_ALGO ranges, tuning rules and the
  // decision cache all read this one number (see CallBytes for alltoallv's).
  const size_t bytes = CallBytes(*request, elem_size);
  std::lock_guard<std::mutex> lock(mu_);

  const AlgorithmInfo* only = nullptr;
  std::string why_prefix;
  Decision early;
  WEFT_ASSIGN_OR_RETURN(bool decided, Preempt(request, elem_size, bytes, &only, &why_prefix, &early));
  if (decided) return early;
  // The per-rank-count collectives have no cost-model entry yet: their algorithm is the default
  // (or forced) one, and with a fabric their chunking is the model's for the even collective's
  // ring of the same bytes (the v ring moves the same blocks; uneven ones only change sizes).
  const Collective c = request->collective;
  const bool per_rank = c == Collective::kAllGatherV || c == Collective::kReduceScatterV;
  if (!fabric_ || per_rank) {
    WEFT_ASSIGN_OR_RETURN(Decision d, DefaultDecision(request, elem_size, only, why_prefix));
    const Collective even_c = c == Collective::kAllGatherV ? Collective::kAllGather : Collective::kReduceScatter;
    const AlgorithmInfo* even_ring = FindAlgorithm(even_c, "ring");
    if (!fabric_ || !per_rank || d.algorithm->name != "ring" || even_ring == nullptr) return d;
    ScheduleRequest even = *request;
    even.collective = even_c;
    even.count = std::max<size_t>(1, bytes / elem_size / static_cast<size_t>(nranks_));
    even.v_counts.clear();
    even.v_displs.clear();
    StatusOr<Decision> e = BucketDecision(&even, elem_size, bytes, even_ring, "");
    if (!e.ok()) return d;  // the default chunking still runs the call
    d.chunk = request->chunk = e->chunk;
    d.why += "; chunked as the model's even ring of the same bytes";
    return d;
  }
  WEFT_ASSIGN_OR_RETURN(Decision d, BucketDecision(request, elem_size, bytes, only, why_prefix));
  request->chunk = d.chunk;
  return d;
}

std::vector<Decision> Selector::Explain(const ScheduleRequest& request, size_t elem_size) {
  ScheduleRequest req = request;
  req.groups = groups_;
  req.all_ranks_mappable = mappable_;
  req.groups_mappable = groups_mappable_;
  std::vector<Decision> all;
  if (req.nranks != nranks_) return all;
  if (!fabric_) {  // nothing to predict: the one decision a call would get
    StatusOr<Decision> d = DefaultDecision(&req, elem_size, nullptr, "");
    if (d.ok()) all.push_back(*d);
    return all;
  }
  for (const AlgorithmInfo* a : Algorithms(req.collective)) {
    if (a->applicable(req)) continue;
    Decision d;
    d.algorithm = a;
    d.predicted_us = std::numeric_limits<double>::infinity();
    d.why = a->name + ": not applicable to this call";
    all.push_back(d);
  }
  if (req.nranks > kFullSimulationMaxRanks && !full_simulation_for_testing_) {
    // At scale: exactly what a decision evaluates (pre-filter rows included).
    ModelDecision(req, elem_size, nullptr, &all);
  } else {
    std::vector<Candidate> cands;
    size_t bytes = NcclBytes(req, elem_size);
    for (const AlgorithmInfo* a : Algorithms(req.collective)) {
      if (!a->applicable(req)) continue;
      std::vector<Candidate> g = Grid(a, bytes, elem_size);
      cands.insert(cands.end(), g.begin(), g.end());
    }
    for (const Candidate& c : cands) all.push_back(Evaluate(c, req, elem_size, 0).decision);
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Decision& x, const Decision& y) { return x.predicted_us < y.predicted_us; });
  return all;
}

uint64_t Selector::DecisionDigest() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  for (const auto& kv : cache_)  // std::map: sorted by key, independent of call order
    s += kv.first + "=" + (kv.second.algorithm ? kv.second.algorithm->name : "-") + "/" +
         std::to_string(kv.second.chunk.chunk_elems) + "/" + std::to_string(kv.second.chunk.channels) + ";";
  return Fnv1a(s);
}

}  // namespace weft
