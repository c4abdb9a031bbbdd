// Creating communicators: from a unique id (bootstrap + TCP + shm), from the launcher's
// environment, as threads of one process (inproc), and by splitting another communicator.
#include "core/init.h"

#include "core/call_check.h"
#include "core/elastic.h"
#include "core/job_secret.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <sstream>

#include "common/log.h"
#include "common/settings.h"
#include "core/bootstrap.h"
#include "core/settings_agreement.h"
#include "net/socket.h"
#include "topo/calibrate.h"
#include "topo/fabric.h"
#include "topo/host.h"
#include "transports/inproc/inproc_transport.h"
#include "transports/registry.h"
#include "tune/selector.h"

namespace weft {
namespace {

// Bad values were refused at creation (CheckSettings), so the fallback only covers "unset".
double EnvSeconds(const char* name, double fallback) { return SettingSecondsOr(name, fallback); }

// Every process says once, on stderr, which WEFT_* variables it does not know (a typo like
// WEFT_ALOG would otherwise be ignored without a word).
void WarnAboutUnknownSettings() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& name : UnknownSettingsInEnvironment())
      fprintf(stderr, "weft: warning: %s is not a weft setting and is ignored (README lists them)\n",
              name.c_str());
  });
}

// The WEFT_* values of this process: a bad one fails creation, naming it (settings.h).
Status CheckSettings() {
  WarnAboutUnknownSettings();
  WEFT_RETURN_IF_ERROR(ValidateSettings());
  // An interface choice that matches nothing fails here, on every job: a one-host job never
  // opens a TCP listener, so it would otherwise go unnoticed until the job spans hosts.
  if (!SettingText("WEFT_SOCKET_IFNAME").empty() || !SettingText("WEFT_SOCKET_FAMILY").empty()) {
    StatusOr<net::SockAddr> chosen = net::ChooseLocalAddress();
    if (!chosen.ok()) return chosen.status();
  }
  return OkStatus();
}


}  // namespace

double DefaultTimeoutSeconds() { return EnvSeconds("WEFT_TIMEOUT", 300); }

void InitCommon(weftComm* comm) {
  comm->magic = kCommMagic;
  comm->timeout_s = DefaultTimeoutSeconds();
  comm->check_calls = CallCheckFromEnv();
  StatusOr<AlgoOverrides> parsed = AlgoOverridesFromEnv();
  if (parsed.ok())
    comm->overrides = std::move(parsed.value());
  else
    comm->overrides_error = parsed.status();
}

// Exchanges host ids, groups ranks by host, and sets up the selector (fabric) when built.
static Status SetupTopology(weftComm* comm, const std::vector<std::string>& host_ids) {
  comm->host_groups.clear();
  std::vector<std::string> seen;
  for (int r = 0; r < comm->nranks; ++r) {
    auto it = std::find(seen.begin(), seen.end(), host_ids[r]);
    if (it == seen.end()) {
      seen.push_back(host_ids[r]);
      comm->host_groups.push_back({r});
    } else {
      comm->host_groups[it - seen.begin()].push_back(r);
    }
  }
  return OkStatus();
}

// WEFT_CALIBRATE=1: links discovery cannot see (shaped, virtualized) are measured by short
// probes between the ranks, before the selector reads the fabric (src/topo/calibrate.h).
static Status MaybeCalibrate(weftComm* comm, Bootstrap* bs) {
  StatusOr<bool> calibrate = CalibrationRequested();
  if (!calibrate.ok()) return calibrate.status();
  if (!*calibrate) return OkStatus();
  CalibrationPeers peers;
  peers.rank = comm->rank;
  peers.nranks = comm->nranks;
  peers.peer_transport = comm->peer_transport;
  peers.shm_enabled = !SettingFlagOr("WEFT_SHM_DISABLE", false);
  peers.allgather = [bs](const void* mine, size_t bytes, void* all) {
    return bs->AllGather(mine, bytes, all);
  };
  StatusOr<CalibrationResult> cal = CalibrateFabric(comm->fabric, peers);
  if (!cal.ok()) return cal.status().WithContext("WEFT_CALIBRATE=1");
  comm->fabric = cal->fabric;
  if (comm->rank == 0) WEFT_INFO("WEFT_CALIBRATE=1:\n%s", cal->Describe().c_str());
  return OkStatus();
}

// The first setup allgather: each rank's verdict on its WEFT_* settings (one byte) and its
// host id, in one fixed-size record. A rank with a bad setting returns its own error (naming
// the variable); the others fail naming that rank, so no rank goes on to wait for it.
static Status ExchangeSettingsAndHostIds(weftComm* comm, Bootstrap* bs, std::vector<std::string>* ids) {
  // flag byte + host id (NUL-padded), then the digests of the settings every rank must share
  constexpr size_t kIdBytes = 256;
  const std::vector<uint64_t> digests = AgreedSettingDigests();
  const size_t record_bytes = kIdBytes + digests.size() * sizeof(uint64_t);
  const Status mine = CheckSettings();
  std::string record(1, mine.ok() ? '\0' : '\1');
  record += TopoHostIdentity();
  record.resize(kIdBytes, '\0');
  record.append(reinterpret_cast<const char*>(digests.data()), digests.size() * sizeof(uint64_t));
  std::vector<char> all(record_bytes * comm->nranks);
  WEFT_RETURN_IF_ERROR_CTX(bs->AllGather(record.data(), record_bytes, all.data()),
                           "exchanging settings verdicts and host ids");
  if (!mine.ok()) return mine;
  ids->assign(comm->nranks, "");
  std::vector<uint64_t> all_digests(digests.size() * comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) {
    const char* rec = all.data() + r * record_bytes;
    if (rec[0] != 0)
      return InvalidArgument("rank " + std::to_string(r) +
                             " has a bad WEFT_* setting (its own error names it)");
    (*ids)[r] = std::string(rec + 1, strnlen(rec + 1, kIdBytes - 1));
    std::memcpy(all_digests.data() + r * digests.size(), rec + kIdBytes,
                digests.size() * sizeof(uint64_t));
  }
  return CompareAgreedSettings(all_digests.data(), comm->nranks, comm->rank);
}

// Exchanges topology summaries, builds the fabric and the selector (collective).
static Status SetupFabric(weftComm* comm, Bootstrap* bs) {
  StatusOr<std::string> mine = DescribeLocalRank(comm->local_rank);
  if (!mine.ok()) return mine.status().WithContext("describing this rank's topology");
  uint64_t len = mine->size(), maxlen = 0;
  std::vector<uint64_t> lens(comm->nranks);
  WEFT_RETURN_IF_ERROR(bs->AllGather(&len, sizeof(len), lens.data()));
  for (uint64_t l : lens) maxlen = std::max(maxlen, l);
  std::string padded = *mine;
  padded.resize(maxlen, '\0');
  std::vector<char> blob(maxlen * comm->nranks);
  if (maxlen > 0) WEFT_RETURN_IF_ERROR(bs->AllGather(padded.data(), maxlen, blob.data()));
  std::vector<std::string> summaries(comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) summaries[r] = std::string(blob.data() + r * maxlen, lens[r]);
  StatusOr<std::shared_ptr<const Fabric>> fabric = BuildFabric(summaries);
  if (!fabric.ok()) return fabric.status().WithContext("building the fabric");
  comm->fabric = *fabric;
  WEFT_RETURN_IF_ERROR(MaybeCalibrate(comm, bs));
  comm->selector = std::make_shared<Selector>(comm->fabric, comm->overrides, comm->direct != nullptr);
  if (comm->rank == 0) WEFT_INFO("fabric:\n%s", comm->fabric->Describe().c_str());
  return OkStatus();
}

// Asks the transport registry (transports/registry.h) which transport serves each peer and
// creates those transports (collective). A window transport (shm) that serves every other
// rank of this rank's host group becomes the communicator's direct transport: one per host,
// so direct algorithms run when all ranks share a host, and hierarchical ones use direct steps
// inside each host while messages cross between hosts (possibly on another transport).
// A host identity is hostname|boot_id|netns inode (topo/host.h); the machine is the part
// before the netns, which ranks in several namespaces of one machine share.
static int RanksOnMyMachine(const std::vector<std::string>& ids, int rank) {
  auto machine = [](const std::string& id) { return id.substr(0, id.rfind('|')); };
  const std::string mine = machine(ids[rank]);
  int n = 0;
  for (const std::string& id : ids) n += machine(id) == mine ? 1 : 0;
  return n;
}

static Status SetupTransports(weftComm* comm, Bootstrap* bs, const std::vector<std::string>& ids) {
  StatusOr<TransportSettings> settings = TransportSettings::Agree(bs);
  if (!settings.ok()) return settings.status().WithContext("choosing transports");
  TransportSetupContext ctx;
  ctx.bootstrap = bs;
  ctx.rank = comm->rank;
  ctx.nranks = comm->nranks;
  ctx.host_of.assign(comm->nranks, 0);
  for (size_t h = 0; h < comm->host_groups.size(); ++h)
    for (int r : comm->host_groups[h]) ctx.host_of[r] = static_cast<int>(h);
  ctx.settings = std::move(*settings);
  ctx.ranks_on_machine = RanksOnMyMachine(ids, comm->rank);
  StatusOr<CreatedTransports> created = CreateTransports(ctx);
  if (!created.ok()) return created.status();
  comm->peer_transport = created->by_peer;
  const int my_host = ctx.host_of[comm->rank];
  for (auto& t : created->owned) {
    auto* direct = dynamic_cast<DirectTransport*>(t.get());
    bool serves_host = false;  // at least one host peer, and every host peer through `t`
    for (int p = 0; p < comm->nranks; ++p) {
      if (p == comm->rank || ctx.host_of[p] != my_host) continue;
      serves_host = comm->peer_transport[p] == t.get();
      if (!serves_host) break;
    }
    if (direct != nullptr && serves_host) comm->direct = direct;
    comm->transports.push_back(std::move(t));
  }
  if (comm->direct != nullptr) {
    std::string peers;
    for (int p = 0; p < comm->nranks; ++p)
      if (p != comm->rank && comm->peer_transport[p] == comm->direct)
        peers += (peers.empty() ? "" : ",") + std::to_string(p);
    WEFT_INFO("rank %d: direct (one-sided) steps inside the host with rank(s) %s", comm->rank,
              peers.c_str());
  }
  std::string summary;
  for (const std::string& s : created->summary) summary += (summary.empty() ? "" : "; ") + s;
  WEFT_INFO("rank %d/%d: %zu host(s); transports: %s (network: %s%s)", comm->rank, comm->nranks,
            comm->host_groups.size(), summary.empty() ? "none" : summary.c_str(),
            ctx.settings.use_ucx ? "ucx, " : "tcp, ", ctx.settings.why_network.c_str());
  return OkStatus();
}

Status InitOverBootstrap(weftComm* comm, std::unique_ptr<Bootstrap> bootstrap) {
  comm->bootstrap = std::move(bootstrap);
  Bootstrap* bs = comm->bootstrap.get();
  comm->rank = bs->rank();
  comm->nranks = bs->nranks();
  SetLogRank(comm->rank);
  std::vector<std::string> ids;
  WEFT_RETURN_IF_ERROR(ExchangeSettingsAndHostIds(comm, bs, &ids));
  WEFT_RETURN_IF_ERROR(SetupTopology(comm, ids));
  std::vector<int> local;
  for (const auto& g : comm->host_groups)
    if (std::find(g.begin(), g.end(), comm->rank) != g.end()) local = g;
  comm->local_rank = static_cast<int>(std::find(local.begin(), local.end(), comm->rank) - local.begin());

  WEFT_RETURN_IF_ERROR(SetupTransports(comm, bs, ids));
  WEFT_RETURN_IF_ERROR(SetupFabric(comm, bs));
  return StartRecoveryListener(comm, bs);  // weftCommShrink's meeting point
}

// Threads of one process share a host. For tests of hierarchical algorithms,
// WEFT_INPROC_GROUPS="3,5" pretends consecutive ranks form groups ("hosts") of those sizes.
static Status InprocHostIds(int nranks, std::vector<std::string>* ids) {
  ids->assign(nranks, TopoHostIdentity());
  const std::string groups_text = SettingText("WEFT_INPROC_GROUPS");
  if (groups_text.empty()) return OkStatus();
  const char* groups = groups_text.c_str();
  int r = 0, g = 0;
  long total = 0;
  for (const char* p = groups; *p != '\0';) {
    char* end = nullptr;
    long size = strtol(p, &end, 10);
    if (end == p || size < 1)
      return InvalidArgument(std::string("WEFT_INPROC_GROUPS=") + groups +
                             ": expected comma-separated positive group sizes");
    total += size;
    for (long k = 0; k < size && r < nranks; ++k) (*ids)[r++] += "#group" + std::to_string(g);
    ++g;
    p = *end == ',' ? end + 1 : end;
  }
  if (total != nranks)
    return InvalidArgument(std::string("WEFT_INPROC_GROUPS=") + groups + " covers " +
                           std::to_string(total) + " ranks, not " + std::to_string(nranks));
  return OkStatus();
}

Status InitInproc(weftComm* comm, std::shared_ptr<InprocHub> hub, int rank,
                  const std::vector<std::string>* host_ids) {
  WEFT_RETURN_IF_ERROR(CheckSettings());  // threads of one process: one environment
  comm->rank = rank;
  comm->nranks = hub->nranks();
  comm->hub = hub;
  auto t = std::make_unique<InprocTransport>(hub, rank);
  comm->peer_transport.assign(comm->nranks, t.get());
  comm->peer_transport[rank] = nullptr;
  comm->transports.push_back(std::move(t));
  // A split child keeps its members' hosts from the parent (WEFT_INPROC_GROUPS describes the
  // parent's ranks, not the child's).
  std::vector<std::string> ids;
  if (host_ids != nullptr && static_cast<int>(host_ids->size()) == comm->nranks)
    ids = *host_ids;
  else
    WEFT_RETURN_IF_ERROR(InprocHostIds(comm->nranks, &ids));
  comm->local_rank = rank;
  WEFT_RETURN_IF_ERROR(SetupTopology(comm, ids));
  // Threads of one process: no fabric describes them, so a selector without a model
  // (WEFT_ALGO, tuning file, then the default flat algorithm), made here at creation.
  comm->selector = std::make_shared<Selector>(comm->nranks, comm->host_groups, comm->overrides);
  return OkStatus();
}

StatusOr<BootstrapId> CreateUniqueId() {
  StatusOr<net::SockAddr> addr = net::ChooseLocalAddress();
  if (!addr.ok()) return addr.status().WithContext("choosing the bootstrap address");
  net::SockAddr listen = *addr;
  listen.set_port(0);
  return StartBootstrapRoot(listen, net::Secret::Random(), EnvSeconds("WEFT_INIT_TIMEOUT", 600));
}

Status JoinAndInit(weftComm* comm, const BootstrapId& id, int nranks, int rank) {
  StatusOr<std::unique_ptr<Bootstrap>> bs =
      Bootstrap::Join(id, rank, nranks, EnvSeconds("WEFT_INIT_TIMEOUT", 120));
  if (!bs.ok()) return bs.status().WithContext("bootstrap");
  return InitOverBootstrap(comm, std::move(bs.value()));
}

// ---- environment ----

namespace {

struct LaunchEnv {
  int rank = -1, size = -1, local_rank = 0;
  std::string root;    // host:port
  std::string source;  // which launcher's variables
  std::string job;     // something every rank of the job shares, for a derived secret
};

bool GetInt(const char* name, int* out) {
  const std::string text = SettingText(name);
  if (text.empty()) return false;
  const char* v = text.c_str();
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  if (*end != '\0') return false;
  *out = static_cast<int>(x);
  return true;
}

std::string Env(const char* name) {
  return SettingText(name);
}

// First host of a Slurm node list: "node[03-05,9],other" -> "node03".
std::string FirstSlurmHost(const std::string& list) {
  std::string first;
  int depth = 0;
  for (char c : list) {
    if (c == '[') depth++;
    if (c == ']') depth--;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  size_t lb = first.find('[');
  if (lb == std::string::npos) return first;
  std::string prefix = first.substr(0, lb), range = first.substr(lb + 1);
  size_t end = range.find_first_of(",-]");
  return prefix + range.substr(0, end);
}

std::string RootFromMasterVars() {
  std::string addr = Env("MASTER_ADDR"), port = Env("MASTER_PORT");
  if (addr.empty() || port.empty()) return "";
  if (addr.find(':') != std::string::npos && addr.front() != '[') addr = "[" + addr + "]";
  return addr + ":" + port;
}

Status ReadLaunchEnv(LaunchEnv* e) {
  std::string root = Env("WEFT_ROOT");
  if (root.empty()) root = RootFromMasterVars();
  if (GetInt("WEFT_RANK", &e->rank) && GetInt("WEFT_WORLD_SIZE", &e->size)) {
    GetInt("WEFT_LOCAL_RANK", &e->local_rank);
    e->source = "WEFT_*";
  } else if (GetInt("RANK", &e->rank) && GetInt("WORLD_SIZE", &e->size)) {
    GetInt("LOCAL_RANK", &e->local_rank);
    e->source = "torchrun (RANK/WORLD_SIZE)";
  } else if (GetInt("SLURM_PROCID", &e->rank) && GetInt("SLURM_NTASKS", &e->size)) {
    GetInt("SLURM_LOCALID", &e->local_rank);
    e->source = "Slurm (SLURM_PROCID/SLURM_NTASKS)";
    e->job = "slurm:" + Env("SLURM_JOB_ID") + "." + Env("SLURM_STEP_ID");
    if (root.empty() && !Env("SLURM_JOB_NODELIST").empty()) {
      // Rank 0 runs on the first node of the allocation; the port is derived from the job id
      // so every rank computes the same one without talking.
      int jobid = atoi(Env("SLURM_JOB_ID").c_str());
      root = FirstSlurmHost(Env("SLURM_JOB_NODELIST")) + ":" + std::to_string(29500 + jobid % 20000);
    }
  } else if (GetInt("OMPI_COMM_WORLD_RANK", &e->rank) && GetInt("OMPI_COMM_WORLD_SIZE", &e->size)) {
    GetInt("OMPI_COMM_WORLD_LOCAL_RANK", &e->local_rank);
    e->source = "Open MPI (OMPI_COMM_WORLD_*)";
    e->job = "ompi:" + Env("PMIX_NAMESPACE") + Env("OMPI_MCA_ess_base_jobid");
    int local_size = 0;
    if (root.empty() && GetInt("OMPI_COMM_WORLD_LOCAL_SIZE", &local_size) && local_size == e->size) {
      // Single-host job: rank 0 is on this host; derive the port from the job's namespace.
      uint32_t h = 2166136261u;
      for (char c : e->job) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
      root = "127.0.0.1:" + std::to_string(29500 + h % 20000);
    }
  } else {
    return InvalidUsage(
        "weftCommInitFromEnv: no launcher environment found: set WEFT_RANK, WEFT_WORLD_SIZE, "
        "WEFT_ROOT (host:port) — or run under weftrun, torchrun (RANK, WORLD_SIZE, "
        "MASTER_ADDR, MASTER_PORT), srun or mpirun");
  }
  if (e->size < 1)
    return InvalidArgument("weftCommInitFromEnv: world size " + std::to_string(e->size) +
                           " from " + e->source + " must be >= 1");
  if (e->rank < 0 || e->rank >= e->size)
    return InvalidArgument("weftCommInitFromEnv: rank " + std::to_string(e->rank) + " from " +
                           e->source + " is outside [0, " + std::to_string(e->size) + ")");
  if (root.empty())
    return InvalidUsage("weftCommInitFromEnv: rank/size come from " + e->source +
                        " but no rendezvous address: set WEFT_ROOT=host:port (or MASTER_ADDR "
                        "and MASTER_PORT)");
  e->root = root;
  return OkStatus();
}

// 128 bits from a string (two FNV-1a 64-bit hashes with different offsets).
net::Secret DerivedSecret(const std::string& s) {
  uint64_t a = 1469598103934665603ULL, b = 7809847782465536322ULL;
  for (char c : s) {
    a = (a ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    b = (b ^ static_cast<unsigned char>(c)) * 1099511628211ULL + 0x9e3779b97f4a7c15ULL;
  }
  net::Secret sec;
  memcpy(sec.bytes, &a, 8);
  memcpy(sec.bytes + 8, &b, 8);
  return sec;
}

// The job's secret: WEFT_SECRET when set; for a same-host job (loopback root) a random one
// handed from rank 0 through a private file (core/job_secret.h); otherwise one derived from
// the public parameters, which is not a secret: a warning says so whatever WEFT_DEBUG says.
Status ChooseJobSecret(const LaunchEnv& e, const net::SockAddr& root, net::Secret* secret,
                       std::string* published_path) {
  std::string hex = Env("WEFT_SECRET");
  if (!hex.empty()) {
    StatusOr<net::Secret> s = net::Secret::FromHex(hex);
    if (!s.ok()) return s.status().WithContext("WEFT_SECRET");
    *secret = *s;
    return OkStatus();
  }
  const std::string job_key = e.root + "|" + std::to_string(e.size) + "|" + e.job;
  if (root.is_loopback()) {
    StatusOr<std::string> path = PrivateSecretPath(job_key);
    if (!path.ok()) return path.status().WithContext("WEFT_SECRET is not set");
    if (e.rank == 0) {
      *secret = net::Secret::Random();
      WEFT_RETURN_IF_ERROR(PublishPrivateSecret(*path, *secret));
      *published_path = *path;
      return OkStatus();
    }
    // A file older than two minutes belongs to an earlier job that died before removing it.
    StatusOr<net::Secret> s =
        ReadPrivateSecret(*path, EnvSeconds("WEFT_INIT_TIMEOUT", 120), time(nullptr) - 120);
    if (!s.ok()) return s.status();
    *secret = *s;
    return OkStatus();
  }
  *secret = DerivedSecret(job_key);
  static std::once_flag warned;
  if (e.rank == 0)
    std::call_once(warned, [&] {
      fprintf(stderr,
              "weft: WARNING: WEFT_SECRET is not set and ranks are not all on this host (%s): "
              "using a secret derived from the job's public parameters, so anyone who can reach "
              "%s can join this job. Set WEFT_SECRET to 32 random hex digits on every rank "
              "(e.g. export WEFT_SECRET=$(openssl rand -hex 16)).\n",
              e.source.c_str(), e.root.c_str());
    });
  return OkStatus();
}

}  // namespace

Status InitFromEnvironment(weftComm* comm) {
  LaunchEnv e;
  WEFT_RETURN_IF_ERROR(ReadLaunchEnv(&e));
  StatusOr<net::SockAddr> root = net::ParseHostPort(e.root);
  if (!root.ok()) return root.status().WithContext("WEFT_ROOT/MASTER_ADDR:MASTER_PORT");
  net::Secret secret;
  std::string published;
  WEFT_RETURN_IF_ERROR(ChooseJobSecret(e, *root, &secret, &published));
  BootstrapId id;
  id.root = *root;
  id.secret = secret;
  if (e.rank == 0) {
    // Rank 0 serves the rendezvous on the address it was given (not every interface: a job
    // on 127.0.0.1 must not be reachable from the network).
    StatusOr<BootstrapId> served =
        StartBootstrapRoot(*root, secret, EnvSeconds("WEFT_INIT_TIMEOUT", 120));
    if (!served.ok()) {
      if (!published.empty()) unlink(published.c_str());
      return served.status().WithContext("starting the rendezvous on " + e.root + " (rank 0)");
    }
  }
  comm->local_rank = e.local_rank;
  Status st = JoinAndInit(comm, id, e.size, e.rank);
  // Every rank has joined (or the job failed): the secret file has served its purpose.
  if (!published.empty()) unlink(published.c_str());
  return st;
}

}  // namespace weft
