// Transport registry: the entries, the per-pair plan and collective creation (registry.h).
#include "transports/registry.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/settings.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#ifdef WEFT_HAVE_UCX
#include "transports/ucx/ucx_selection.h"
#include "transports/ucx/ucx_transport.h"
#endif

namespace weft {

StatusOr<NetworkTransportChoice> ParseTransportSetting(const std::string& value) {
  if (value.empty()) return NetworkTransportChoice::kAuto;
  if (value == "ucx") return NetworkTransportChoice::kUcx;
  if (value == "tcp" || value == "^ucx") return NetworkTransportChoice::kTcp;
  return InvalidArgument("WEFT_TRANSPORT=" + ShownValue(value) +
                         ": expected ucx, tcp or ^ucx (unset: ucx where UCX has an RDMA lane)");
}

namespace {

const char* ChoiceName(uint8_t c) {
  return c == 0 ? "unset (auto)" : c == 1 ? "ucx" : c == 2 ? "tcp" : "invalid";
}

// One rank's view, exchanged at init. choice: 0 auto, 1 ucx, 2 tcp, 255 invalid.
struct SettingsRecord {
  uint8_t shm_enabled;
  uint8_t choice;
  uint8_t ucx_built;
  uint8_t rdma_lane;
};


// This rank's record; *parse_error holds a bad WEFT_TRANSPORT's message.
SettingsRecord LocalSettings(Status* parse_error) {
  SettingsRecord mine{};
  // SettingFlagOr: a bad value is reported by ValidateSettings when the communicator is created.
  mine.shm_enabled = SettingFlagOr("WEFT_SHM_DISABLE", false) ? 0 : 1;
  StatusOr<NetworkTransportChoice> choice = ParseTransportSetting(SettingText("WEFT_TRANSPORT"));
  if (!choice.ok()) {
    *parse_error = choice.status();
    mine.choice = 255;
  } else {
    mine.choice = *choice == NetworkTransportChoice::kAuto ? 0 : *choice == NetworkTransportChoice::kUcx ? 1 : 2;
  }
#ifdef WEFT_HAVE_UCX
  mine.ucx_built = 1;
  // The lane query costs a UCT scan: only the auto rule needs it.
  mine.rdma_lane = mine.choice == 0 && UcxWantedByDefault() ? 1 : 0;
#endif
  return mine;
}

// The network transport every rank will use, from all ranks' records.
Status DecideNetwork(const std::vector<SettingsRecord>& all, int me, TransportSettings* out) {
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].choice == 255)
      return InvalidArgument("rank " + std::to_string(r) + " has an invalid WEFT_TRANSPORT (its error names the value)");
    if (all[r].choice != all[0].choice)
      return InvalidUsage("ranks disagree on WEFT_TRANSPORT: rank 0 has " + std::string(ChoiceName(all[0].choice)) +
                          ", rank " + std::to_string(r) + " has " + ChoiceName(all[r].choice) +
                          " (every rank must set the same value)");
  }
  bool all_built = std::all_of(all.begin(), all.end(), [](const SettingsRecord& s) { return s.ucx_built; });
  if (all[0].choice == 1) {
    if (!all_built)
      return InvalidUsage(std::string("WEFT_TRANSPORT=ucx, but ") +
                          (all[me].ucx_built ? "another rank's" : "this") +
                          " weft was built without UCX (CMake option WEFT_UCX)");
    out->use_ucx = true;
    out->why_network = "WEFT_TRANSPORT=ucx";
  } else if (all[0].choice == 2) {
    out->why_network = "WEFT_TRANSPORT=" + ShownValue(SettingText("WEFT_TRANSPORT"));
  } else {
    int without = -1;
    for (size_t r = 0; r < all.size() && without < 0; ++r)
      if (!all[r].rdma_lane) without = static_cast<int>(r);
    out->use_ucx = without < 0;
    out->why_network = without < 0 ? "auto: every rank's UCX has an RDMA lane"
                                   : "auto: no UCX RDMA lane on rank " + std::to_string(without);
  }
  return OkStatus();
}

}  // namespace

StatusOr<TransportSettings> TransportSettings::Agree(TransportBootstrap* bootstrap) {
  Status parse_error;
  SettingsRecord mine = LocalSettings(&parse_error);
  std::vector<SettingsRecord> all(bootstrap->nranks());
  WEFT_RETURN_IF_ERROR_CTX(bootstrap->AllGather(&mine, sizeof(mine), all.data()),
                           "agreeing on transport settings");
  // The rank with the bad value reports the value itself; the others name that rank.
  if (!parse_error.ok()) return parse_error;
  TransportSettings s;
  for (const SettingsRecord& r : all) s.shm_enabled.push_back(r.shm_enabled != 0);
  WEFT_RETURN_IF_ERROR(DecideNetwork(all, bootstrap->rank(), &s));
  return s;
}

namespace {

bool ShmReaches(const TransportSetupContext& ctx, int a, int b) {
  return ctx.same_host(a, b) && ctx.settings.shm_enabled[a] && ctx.settings.shm_enabled[b];
}

StatusOr<std::unique_ptr<Transport>> CreateShm(const TransportSetupContext& ctx,
                                               const std::vector<int>& my_peers) {
  // Every rank calls ShmTransport::Create, also one with no shm peer (it creates nothing).
  std::vector<int> local = my_peers;
  local.push_back(ctx.rank);
  std::sort(local.begin(), local.end());
  StatusOr<ShmOptions> options = ShmOptionsFromEnv();
  if (!options.ok()) return options.status();
  options->ranks_on_machine = ctx.ranks_on_machine;
  StatusOr<std::unique_ptr<ShmTransport>> shm = ShmTransport::Create(ctx.bootstrap, local, *options);
  if (!shm.ok()) return shm.status().WithContext("creating the shared-memory transport");
  return std::unique_ptr<Transport>(std::move(*shm));
}

bool TcpReaches(const TransportSetupContext& ctx, int a, int b) { return !ctx.settings.use_ucx; }

StatusOr<std::unique_ptr<Transport>> CreateTcp(const TransportSetupContext& ctx, const std::vector<int>&) {
  TcpOptions options = TcpOptionsFromEnv();
  options.ranks_on_machine = ctx.ranks_on_machine;
  StatusOr<std::unique_ptr<TcpTransport>> tcp = TcpTransport::Create(ctx.bootstrap, options);
  if (!tcp.ok()) return tcp.status().WithContext("creating the TCP transport");
  return std::unique_ptr<Transport>(std::move(*tcp));
}

#ifdef WEFT_HAVE_UCX
bool UcxReaches(const TransportSetupContext& ctx, int a, int b) { return ctx.settings.use_ucx; }

StatusOr<std::unique_ptr<Transport>> CreateUcx(const TransportSetupContext& ctx, const std::vector<int>&) {
  UcxOptions options = UcxOptionsFromEnv();
  options.ranks_on_machine = ctx.ranks_on_machine;
  StatusOr<std::unique_ptr<UcxTransport>> ucx = UcxTransport::Create(ctx.bootstrap, options);
  if (!ucx.ok()) return ucx.status().WithContext("creating the UCX transport (" + ctx.settings.why_network + ")");
  return std::unique_ptr<Transport>(std::move(*ucx));
}
#endif

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += ",... (" + std::to_string(ranks.size()) + ")";
  return s;
}

}  // namespace

const std::vector<TransportEntry>& TransportRegistry() {
  static const std::vector<TransportEntry> entries = {
      {"shm", 300, ShmReaches, CreateShm},
#ifdef WEFT_HAVE_UCX
      {"ucx", 200, UcxReaches, CreateUcx},
#endif
      {"tcp", 100, TcpReaches, CreateTcp},
  };
  return entries;
}

StatusOr<TransportPlan> PlanTransports(const TransportSetupContext& ctx) {
  const std::vector<TransportEntry>& reg = TransportRegistry();
  TransportPlan plan;
  plan.used.assign(reg.size(), false);
  plan.entry_of_pair.assign(ctx.nranks, std::vector<int>(ctx.nranks, -1));
  for (int a = 0; a < ctx.nranks; ++a) {
    for (int b = 0; b < ctx.nranks; ++b) {
      if (a == b) continue;
      int best = -1;
      for (size_t e = 0; e < reg.size(); ++e)
        if (reg[e].reaches(ctx, a, b) && (best < 0 || reg[e].priority > reg[best].priority))
          best = static_cast<int>(e);
      if (best < 0)
        return InternalError("no transport reaches rank " + std::to_string(b) + " from rank " + std::to_string(a));
      plan.entry_of_pair[a][b] = best;
      plan.used[best] = true;
    }
  }
  return plan;
}

StatusOr<CreatedTransports> CreateTransports(const TransportSetupContext& ctx) {
  StatusOr<TransportPlan> plan = PlanTransports(ctx);
  if (!plan.ok()) return plan.status();
  const std::vector<TransportEntry>& reg = TransportRegistry();
  CreatedTransports out;
  out.by_peer.assign(ctx.nranks, nullptr);
  for (size_t e = 0; e < reg.size(); ++e) {
    if (!plan->used[e]) continue;  // the same answer on every rank: nobody creates it
    std::vector<int> mine;
    for (int p = 0; p < ctx.nranks; ++p)
      if (p != ctx.rank && plan->entry(ctx.rank, p) == static_cast<int>(e)) mine.push_back(p);
    StatusOr<std::unique_ptr<Transport>> t = reg[e].create(ctx, mine);
    if (!t.ok()) return t.status();
    if (mine.empty()) continue;  // took part in the collective creation only
    for (int p : mine) out.by_peer[p] = t->get();
    out.summary.push_back(std::string(reg[e].name) + " to rank(s) " + RankList(mine));
    out.owned.push_back(std::move(*t));
  }
  return out;
}

}  // namespace weft
