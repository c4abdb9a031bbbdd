// Calibration of a job's fabric by short probes between its ranks (see calibrate.h).
#include "topo/calibrate.h"
#include "common/huge_pages.h"
#include "common/settings.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <sstream>
#include <thread>

#include "kernels/codec.h"
#include "kernels/reduce.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

double NowUs() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

// This process's CPU time (every thread, user and system), us.
double ProcessCpuUs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// Every probe message carries this tag (a descriptor no collective hashes to is not
// guaranteed, but calibration runs before any collective and drains all its messages).
constexpr uint64_t kCalibrationTag = (0xCA1B0000ULL << 32) | 1;
constexpr int kChannel = 0;

enum : uint64_t { kPing = 1, kData = 2, kEnd = 3, kStackCpu = 4, kDataIntoSink = 5 };
struct Control {
  uint64_t cmd = 0;
  uint64_t bytes = 0;
};

bool IsMemoryTier(LinkType t) { return t == LinkType::kSameNuma || t == LinkType::kCrossSocket; }
bool IsNetworkTier(LinkType t) { return t == LinkType::kNetwork || t == LinkType::kNetworkSpine; }

// Blocking point-to-point over one transport, with a deadline so a dead peer is an error.
class PairLink {
 public:
  PairLink(Transport* t, int peer, double timeout_s) : t_(t), peer_(peer), timeout_us_(timeout_s * 1e6) {}

  Status Send(const void* buf, size_t bytes) {
    TransportRequest req;
    WEFT_RETURN_IF_ERROR(t_->PostSend(peer_, kChannel, kCalibrationTag, buf, bytes, &req));
    return Wait(&req, "sending");
  }
  Status Recv(void* buf, size_t bytes) {
    TransportRequest req;
    WEFT_RETURN_IF_ERROR(t_->PostRecv(peer_, kChannel, kCalibrationTag, buf, bytes, &req));
    return Wait(&req, "receiving");
  }
  bool TakesSinks() const { return t_->TakesSinks(); }
  Status RecvToSink(size_t bytes, RecvSink* sink) {
    TransportRequest req;
    WEFT_RETURN_IF_ERROR(t_->PostRecvToSink(peer_, kChannel, kCalibrationTag, bytes, sink, &req));
    return Wait(&req, "receiving into a sink");
  }
  // Control + payload posted together (the receiver needs the control to post the payload).
  Status SendData(const void* buf, size_t bytes, uint64_t cmd = kData) {
    Control c{cmd, bytes};
    TransportRequest creq, dreq;
    WEFT_RETURN_IF_ERROR(t_->PostSend(peer_, kChannel, kCalibrationTag, &c, sizeof(c), &creq));
    WEFT_RETURN_IF_ERROR(t_->PostSend(peer_, kChannel, kCalibrationTag, buf, bytes, &dreq));
    WEFT_RETURN_IF_ERROR(Wait(&creq, "sending a probe header"));
    return Wait(&dreq, "sending a probe");
  }
  // Two probes posted back to back, `lead` then `bytes` bytes of buf, each acknowledged (the
  // answers' receives posted first): the time between the two answers, us. The lead probe
  // keeps the link busy up to the second one, so no idle gap before it refills a token
  // bucket: a peer slow to answer (4 ranks on 2 loaded cores) let the netns harness's 1 MB
  // bucket refill between Rate's probes, and the fastest 8 MiB probe moved at 0.265-0.28 GB/s
  // on a 0.25 GB/s shaper.
  StatusOr<double> BackToBackUs(const void* buf, size_t lead, size_t bytes) {
    Control c[2] = {{kData, lead}, {kData, bytes}};
    uint64_t ack[2] = {0, 0};
    TransportRequest answers[2], sends[4];
    for (int i = 0; i < 2; ++i)
      WEFT_RETURN_IF_ERROR(t_->PostRecv(peer_, kChannel, kCalibrationTag, &ack[i], sizeof(ack[i]), &answers[i]));
    for (int i = 0; i < 2; ++i) {
      WEFT_RETURN_IF_ERROR(t_->PostSend(peer_, kChannel, kCalibrationTag, &c[i], sizeof(c[i]), &sends[2 * i]));
      WEFT_RETURN_IF_ERROR(t_->PostSend(peer_, kChannel, kCalibrationTag, buf, i ? bytes : lead, &sends[2 * i + 1]));
    }
    double answered[2] = {0, 0};
    WEFT_RETURN_IF_ERROR(WaitAll(answers, 2, answered, "waiting for back-to-back probes' answers"));
    for (TransportRequest& s : sends) WEFT_RETURN_IF_ERROR(Wait(&s, "sending back-to-back probes"));
    return answered[1] - answered[0];
  }

  // Quiet: waits block in the transport from the start (no spinning), so the process's CPU
  // time over a transfer is the stack's and the waits' wake-ups, as in a call's wait
  // (exec/executor.cc: one busy transport waits inside it). For the guard's lifetime.
  class Quiet {
   public:
    Quiet(PairLink& link, bool quiet) : link_(link) { link_.quiet_ = quiet; }
    ~Quiet() { link_.quiet_ = false; }

   private:
    PairLink& link_;
  };

 private:
  Status Wait(TransportRequest* req, const char* what) {
    double at = 0;
    return WaitAll(req, 1, &at, what);
  }
  // Waits for reqs[0..n), stamping each one's completion (us) as it is seen. Spins on
  // Progress(0) (latency probes must not pay a sleep), yields the core after 20 us (the peer
  // may share it: on a loaded machine the scheduler can put both ranks on one core, and a
  // spinner that never yields makes every hop cost a scheduler tick), and polls with a short
  // wait once a transfer is clearly long.
  Status WaitAll(TransportRequest* reqs, int n, double* done_at, const char* what) {
    const double start = NowUs();
    for (int left = n; left > 0;) {
      for (int i = 0; i < n; ++i)
        if (done_at[i] == 0 && reqs[i].done.load(std::memory_order_acquire)) {
          done_at[i] = NowUs();
          --left;
        }
      if (left == 0) break;
      double waited = NowUs() - start;
      const bool spin = !quiet_ && waited < 2000;
      if (spin && waited > 20) sched_yield();
      Status s = t_->Progress(spin ? 0 : 200);
      if (!s.ok()) return s.WithContext(std::string("calibration ") + what + " peer " + std::to_string(peer_));
      if (waited > timeout_us_)
        return TimeoutError(std::string("calibration: ") + what + " peer " + std::to_string(peer_) + " (" +
                            t_->name() + ") made no progress for " + std::to_string(timeout_us_ / 1e6) + " s");
    }
    for (int i = 0; i < n; ++i)
      if (!reqs[i].status.ok())
        return reqs[i].status.WithContext(std::string("calibration ") + what + " peer " + std::to_string(peer_));
    return OkStatus();
  }

  Transport* t_;
  int peer_;
  double timeout_us_;
  bool quiet_ = false;
};

// A probe's data buffer, reused across probes as a call's buffers are across calls. weft folds
// a reused single-copy source into huge pages (common/huge_pages.h), so a call's steady state
// reads from huge pages; the probe starts there (AllocateHostBuffer) instead of measuring the
// first uses of 4 KiB pages (4.4 against 10-11 GB/s for the shm tier here).
class ProbeBuffer {
 public:
  ProbeBuffer() = default;
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  ~ProbeBuffer() { FreeHostBuffer(data_, size_); }
  // At least `bytes`, every byte `fill` when it had to grow (pages touched once, not timed).
  Status Ensure(size_t bytes, char fill) {
    if (bytes <= size_) return OkStatus();
    FreeHostBuffer(data_, size_);
    size_ = 0;
    data_ = static_cast<char*>(AllocateHostBuffer(bytes));
    if (data_ == nullptr)
      return SystemError("calibration: out of memory for a " + std::to_string(bytes) + "-byte probe");
    size_ = bytes;
    std::memset(data_, fill, bytes);
    return OkStatus();
  }
  char* data() { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// Where a kDataIntoSink probe lands: a 256 KiB buffer used over and over, as the bounce of a
// receive streamed into a codec chain (exec/chain_sink.h), so the copy writes into the cache
// while it reads the sender's memory (and pins its pages) as any other receive does.
class CacheSink final : public RecvSink {
 public:
  unsigned char* Space(size_t* room) override {
    if (filled_ == buf_.size()) filled_ = 0;
    *room = buf_.size() - filled_;
    return buf_.data() + filled_;
  }
  void Landed(size_t bytes) override { filled_ += bytes; }

 private:
  std::vector<unsigned char> buf_ = std::vector<unsigned char>(256u << 10);
  size_t filled_ = 0;
};

// The passive side: answers pings and acknowledges data until told to stop.
Status Respond(PairLink& link, const CalibrateOptions& opt) {
  ProbeBuffer buf;
  uint64_t ack = 0;
  for (;;) {
    Control c;
    WEFT_RETURN_IF_ERROR(link.Recv(&c, sizeof(c)));
    if (c.cmd == kEnd) return OkStatus();
    if (c.cmd == kPing) {
      WEFT_RETURN_IF_ERROR(link.Send(&ack, sizeof(ack)));
      continue;
    }
    if ((c.cmd != kData && c.cmd != kStackCpu && c.cmd != kDataIntoSink) || c.bytes > opt.max_probe_bytes)
      return InternalError("calibration: unexpected probe header cmd=" + std::to_string(c.cmd) +
                           " bytes=" + std::to_string(c.bytes));
    if (c.cmd == kDataIntoSink && link.TakesSinks()) {  // the driver asks only where it does
      CacheSink sink;
      WEFT_RETURN_IF_ERROR(link.RecvToSink(c.bytes, &sink));
      WEFT_RETURN_IF_ERROR(link.Send(&ack, sizeof(ack)));
      continue;
    }
    WEFT_RETURN_IF_ERROR(buf.Ensure(c.bytes, 0));
    // A stack probe is answered with the CPU time (ns) this end spent receiving it.
    const bool cpu = c.cmd == kStackCpu;
    uint64_t answer = ack;
    {
      PairLink::Quiet quiet(link, cpu);
      const double cpu0 = ProcessCpuUs();
      WEFT_RETURN_IF_ERROR(link.Recv(buf.data(), c.bytes));
      if (cpu) answer = static_cast<uint64_t>(std::max(0.0, ProcessCpuUs() - cpu0) * 1e3);
    }
    WEFT_RETURN_IF_ERROR(link.Send(&answer, sizeof(answer)));
  }
}

// The driving side of one pair.
class Driver {
 public:
  Driver(PairLink& link, const CalibrateOptions& opt) : link_(link), opt_(opt) {}

  // Half the fastest round trip: on a shared machine slower ones measure the scheduler.
  StatusOr<double> OneWayUs() {
    std::vector<double> rtts;
    uint64_t ack = 0;
    for (int i = 0; i < opt_.latency_round_trips + 3; ++i) {
      Control c{kPing, 0};
      double t0 = NowUs();
      WEFT_RETURN_IF_ERROR(link_.Send(&c, sizeof(c)));
      WEFT_RETURN_IF_ERROR(link_.Recv(&ack, sizeof(ack)));
      if (i >= 3) rtts.push_back(NowUs() - t0);  // the first round trips warm the path
    }
    return *std::min_element(rtts.begin(), rtts.end()) / 2;
  }

  // Send `bytes` and wait for the 8-byte answer: one probe's time in us. `cmd` kDataIntoSink:
  // the responder receives into a cache-sized sink (CacheSink) instead of a buffer of `bytes`.
  StatusOr<double> TimeData(size_t bytes, uint64_t cmd = kData) {
    WEFT_RETURN_IF_ERROR(buf_.Ensure(bytes, 1));
    uint64_t ack = 0;
    double t0 = NowUs();
    WEFT_RETURN_IF_ERROR(link_.SendData(buf_.data(), bytes, cmd));
    WEFT_RETURN_IF_ERROR(link_.Recv(&ack, sizeof(ack)));
    return NowUs() - t0;
  }

  // Rate (GB/s) from the slope between big/4 and big; the best of `reps` of each size (the
  // machine may be shared: the fastest run is the link, slower ones are interference).
  // spread_ = slowest / fastest large probe: how much the machine's load moved them.
  StatusOr<double> Rate(size_t big, int reps, uint64_t cmd = kData) {
    size_t small = std::max<size_t>(big / 4, 4096);
    double ts = 1e300, tb = 1e300, tb_max = 0;
    for (int i = 0; i < reps; ++i) {
      WEFT_ASSIGN_OR_RETURN(double s, TimeData(small, cmd));
      WEFT_ASSIGN_OR_RETURN(double b, TimeData(big, cmd));
      ts = std::min(ts, s);
      tb = std::min(tb, b);
      tb_max = std::max(tb_max, b);
    }
    spread_ = std::max(spread_, tb_max / tb);
    drained_small_us_ = ts;
    small_bytes_ = small;
    fastest_big_gbps_ = static_cast<double>(big) / (std::max(tb, 1e-3) * 1e3);
    // A slope that is not positive (noise swamped a tiny difference): fall back to the big
    // probe's average rate, which only underestimates by its fixed costs.
    if (tb > ts) return static_cast<double>(big - small) / ((tb - ts) * 1e3);
    return static_cast<double>(big) / (tb * 1e3);
  }

  // A shaped link's sustained rate (GB/s): `big` bytes behind a quarter of them, timed
  // between the two answers (PairLink::BackToBackUs), the median of `reps`: a loaded
  // machine can slow one (a stalled sender) or speed one (a receiver slow enough to fill its
  // socket buffer idles the link, which refills the bucket), so neither extreme is the link.
  StatusOr<double> SustainedRate(size_t big, int reps) {
    WEFT_RETURN_IF_ERROR(buf_.Ensure(big, 1));
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      WEFT_ASSIGN_OR_RETURN(double us, link_.BackToBackUs(buf_.data(), std::max<size_t>(big / 4, 4096), big));
      t.push_back(std::max(us, 1e-3));
    }
    std::sort(t.begin(), t.end());
    spread_ = std::max(spread_, t.back() / t.front());
    return static_cast<double>(big) / (t[t.size() / 2] * 1e3);
  }

  // Picks the large probe so it lasts about target_ms: probes double from `lo` (the first
  // ones also drain a token bucket's burst and open TCP's window) until one lasts a quarter
  // of it; the large probe is 4x that one, the small one (Rate) is that one's size.
  StatusOr<size_t> ChooseProbeBytes(size_t lo, size_t hi) {
    size_t s = lo;
    for (;;) {
      WEFT_ASSIGN_OR_RETURN(double t, TimeData(s));
      // At least 4 MiB-equivalent (16 x lo) large probes: a loaded machine can stretch a
      // small probe past target_ms / 4, and a burst of a token bucket (~4 ms of traffic)
      // must stay small against the probe.
      if ((t >= opt_.target_ms * 1e3 / 4 && s >= 4 * lo) || s * 8 > hi) break;
      s *= 2;
    }
    return std::min(hi, 4 * s);
  }

  // A token bucket's depth (tbf on a veth, a cloud NIC's burst credit), in bytes: after a
  // pause that refills it, the first burst bytes leave at the line rate, so Rate's small
  // probe (big / 4), timed right after a large one (bucket drained), is faster after a pause
  // by burst / rate. The small probe, not the large one: the saving is a larger share of it
  // (a 1 MB burst is 48% of a 2 MiB probe at 2 Gbit/s, 12% of the 8 MiB one), above the noise
  // and TCP's restart after idle. 0 when the rested probe is not clearly faster (an unshaped
  // link, or noise); at most the probe's size (a deeper bucket is not seen).
  StatusOr<double> Burst(double gbps) {
    double rested = 1e300;
    for (int i = 0; i < 2; ++i) {
      // target_ms refills a bucket of up to target_ms of traffic at the rate (25 ms: 6 MB at
      // 2 Gbit/s, against tbf's usual 4 ms).
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(opt_.target_ms * 1e3)));
      WEFT_ASSIGN_OR_RETURN(double t, TimeData(small_bytes_));
      rested = std::min(rested, t);
    }
    const double saved_us = drained_small_us_ - rested;
    if (!(saved_us > 0.1 * drained_small_us_)) return 0.0;
    return std::min(static_cast<double>(small_bytes_), saved_us * gbps * 1e3);
  }

  // The CPU the link's software stack costs per byte (LinkParams::stack_cpu_gbps): `bytes`
  // sent `reps` times with both ends waiting in the transport, each end's process CPU time
  // over its side (the responder's comes back in its answer); the least of each side's (other
  // load only adds to it). GB/s of payload per core, the mean of the two sides' rates.
  StatusOr<double> StackCpuGbps(size_t bytes, int reps) {
    WEFT_RETURN_IF_ERROR(buf_.Ensure(bytes, 1));
    double send_us = 1e300, recv_us = 1e300;
    PairLink::Quiet quiet(link_, true);
    for (int i = 0; i < reps; ++i) {
      uint64_t answer_ns = 0;
      const double cpu0 = ProcessCpuUs();
      WEFT_RETURN_IF_ERROR(link_.SendData(buf_.data(), bytes, kStackCpu));
      send_us = std::min(send_us, ProcessCpuUs() - cpu0);
      WEFT_RETURN_IF_ERROR(link_.Recv(&answer_ns, sizeof(answer_ns)));
      recv_us = std::min(recv_us, static_cast<double>(answer_ns) / 1e3);
    }
    const double per_side_us = std::max((send_us + recv_us) / 2, 1e-3);
    return static_cast<double>(bytes) / (per_side_us * 1e3);
  }

  double spread() const { return spread_; }
  // The fastest large probe of the last Rate, bytes over its whole time (GB/s).
  double fastest_big_gbps() const { return fastest_big_gbps_; }

  Status End() {
    Control c{kEnd, 0};
    return link_.Send(&c, sizeof(c));
  }

 private:
  PairLink& link_;
  const CalibrateOptions& opt_;
  ProbeBuffer buf_;
  double spread_ = 1;
  double fastest_big_gbps_ = 0;
  double drained_small_us_ = 0;  // Rate's fastest small probe (after a large one: drained)
  size_t small_bytes_ = 0;
};

// Rank a's measurement of one tier (figures in `m`).
Status DriveTier(const Fabric& fabric, PairLink& link, const CalibrateOptions& opt, TierMeasurement* m) {
  Driver d(link, opt);
  WEFT_ASSIGN_OR_RETURN(m->oneway_us, d.OneWayUs());
  size_t lo = opt.min_probe_bytes, hi = opt.max_probe_bytes;
  if (IsMemoryTier(m->type)) {
    // Inside the cache: both ranks' buffers (sender + receiver + the transport's staging)
    // within the cache a call can use (calibrated just before); beyond it: 4x the LLC (the
    // DRAM-resident figure).
    int64_t llc = fabric.LlcBytes(fabric.rank(m->a).host);
    int64_t cache = fabric.CacheBytes(fabric.rank(m->a).host);
    size_t cached = cache > 0 ? std::max<size_t>(lo, static_cast<size_t>(cache) / 8) : 1u << 20;
    size_t dram = llc > 0 ? static_cast<size_t>(llc) * 4 : 32u << 20;
    cached = std::min(cached, hi);
    dram = std::min(std::max(dram, 4 * cached), hi);
    WEFT_RETURN_IF_ERROR(d.TimeData(cached).status());  // warm-up
    WEFT_ASSIGN_OR_RETURN(m->gbps, d.Rate(cached, 5));
    WEFT_RETURN_IF_ERROR(d.TimeData(dram).status());
    WEFT_ASSIGN_OR_RETURN(m->dram_gbps, d.Rate(dram, 2));
    // The same source into the cache, as a receive streamed into a chain lands (its copy's
    // reads and page pinning remain: 4.5-5.0 GB/s on the 2x2 harness against 4.2-4.9 stored,
    // where halving the DRAM share priced it at ~8 and the 1-bit call ~3 ms short per rank).
    if (link.TakesSinks()) {
      WEFT_ASSIGN_OR_RETURN(m->dram_sink_gbps, d.Rate(dram, 2, kDataIntoSink));
    }
    m->probe_bytes = static_cast<double>(dram);
  } else {
    WEFT_ASSIGN_OR_RETURN(size_t big, d.ChooseProbeBytes(lo, hi));
    WEFT_ASSIGN_OR_RETURN(m->gbps, d.Rate(big, 2));  // also the drained probe Burst compares
    if (IsNetworkTier(m->type)) {
      // The slope of Rate's probes includes any refill of a token bucket between them: the
      // sustained rate is the link's (the fixed costs it leaves out are the latency's). At
      // most the fastest large probe's own rate, which no refill can lower: on a loaded
      // machine a late look at the first answer shortens the interval (load 6 on 2 cores:
      // 0.30-0.37 GB/s from the interval on the 0.25 GB/s shaper).
      WEFT_ASSIGN_OR_RETURN(double sustained, d.SustainedRate(big, 3));
      m->gbps = std::min(sustained, d.fastest_big_gbps());
      WEFT_ASSIGN_OR_RETURN(m->burst_bytes, d.Burst(m->gbps));
      WEFT_ASSIGN_OR_RETURN(m->stack_cpu_gbps, d.StackCpuGbps(big, 3));
    }
    m->probe_bytes = static_cast<double>(big);
  }
  m->spread = d.spread();
  return d.End();
}

// One tier on this rank: drive (a), respond (b) or nothing; then a barrier that also tells
// every rank whether some rank failed.
Status RunTier(const Fabric& fabric, const CalibrationPeers& peers, const CalibrateOptions& opt,
               TierMeasurement* m) {
  Status mine;
  double t0 = NowUs();
  if (peers.rank == m->a || peers.rank == m->b) {
    int peer = peers.rank == m->a ? m->b : m->a;
    Transport* t = peers.peer_transport[peer];
    if (t == nullptr) {
      mine = InternalError("calibration: no transport to rank " + std::to_string(peer));
    } else {
      PairLink link(t, peer, opt.timeout_s);
      mine = peers.rank == m->a ? DriveTier(fabric, link, opt, m) : Respond(link, opt);
    }
  }
  m->seconds = (NowUs() - t0) / 1e6;
  char failed = mine.ok() ? 0 : 1;
  std::vector<char> all(peers.nranks);
  WEFT_RETURN_IF_ERROR_CTX(peers.allgather(&failed, 1, all.data()), "calibration barrier");
  if (!mine.ok()) return mine.WithContext(std::string("calibrating tier ") + LinkTypeName(m->type));
  for (int r = 0; r < peers.nranks; ++r)
    if (all[r])
      return RemoteError(std::string("calibration of tier ") + LinkTypeName(m->type) + " failed on rank " +
                         std::to_string(r));
  return OkStatus();
}

// Rank a's figures to every rank (so every rank applies the same numbers).
Status ShareMeasurements(const CalibrationPeers& peers, std::vector<TierMeasurement>* tiers) {
  constexpr int kFields = 9;
  const size_t n = tiers->size();
  std::vector<double> mine(n * kFields, 0.0), all(n * kFields * peers.nranks);
  for (size_t i = 0; i < n; ++i) {
    const TierMeasurement& m = (*tiers)[i];
    if (m.a != peers.rank) continue;
    double v[kFields] = {m.oneway_us, m.gbps, m.dram_gbps, m.probe_bytes, m.seconds, m.spread, m.burst_bytes,
                         m.stack_cpu_gbps, m.dram_sink_gbps};
    std::copy(v, v + kFields, mine.begin() + i * kFields);
  }
  if (n == 0) return OkStatus();
  WEFT_RETURN_IF_ERROR_CTX(peers.allgather(mine.data(), mine.size() * sizeof(double), all.data()),
                           "sharing calibration results");
  for (size_t i = 0; i < n; ++i) {
    TierMeasurement& m = (*tiers)[i];
    const double* v = all.data() + (static_cast<size_t>(m.a) * n + i) * kFields;
    m.oneway_us = v[0];
    m.gbps = v[1];
    m.dram_gbps = v[2];
    m.probe_bytes = v[3];
    m.seconds = v[4];
    m.spread = v[5];
    m.burst_bytes = v[6];
    m.stack_cpu_gbps = v[7];
    m.dram_sink_gbps = v[8];
  }
  return OkStatus();
}

// Best-of-`reps` rate (GB/s of destination) of `fn` over `bytes`, after one untimed pass that
// faults the pages in and warms the cache.
template <typename Fn>
double BestRate(size_t bytes, Fn fn, int reps = 3) {
  fn();
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    double t0 = NowUs();
    fn();
    best = std::min(best, NowUs() - t0);
  }
  return static_cast<double>(bytes) / (std::max(best, 1e-3) * 1e3);
}

// The cache a call can use, from copy rates over working sets (see calibrate.h). Buffers of
// at most max_probe_bytes: a host whose LLC instances add up to more (a many-chiplet server)
// is not swept past that, and a sweep that never slows gives the largest working set it
// tried (a lower bound), not the LLC.
int64_t MeasureCacheBytes(int64_t llc, double dram_copy_gbps, const CalibrateOptions& opt) {
  std::vector<std::pair<double, double>> points;
  const size_t top = std::min(static_cast<size_t>(llc), opt.max_probe_bytes);
  for (size_t buf = std::max<size_t>(64u << 10, static_cast<size_t>(llc) / 32); buf <= top; buf *= 2) {
    std::vector<char> dst(buf, 1), src(buf, 2);
    points.emplace_back(2.0 * static_cast<double>(buf),
                        BestRate(buf, [&] { kernels::Copy(dst.data(), src.data(), buf); }, 7));
  }
  return FitCacheBytes(points, dram_copy_gbps, std::min<int64_t>(llc, 2 * static_cast<int64_t>(top)));
}

// Wall time of `threads` threads released together, each copying its own src[t] to dst[t]
// (`bytes` each): from the first start to the last end, us.
double ConcurrentCopyUs(int threads, std::vector<std::vector<char>>& dst,
                        const std::vector<std::vector<char>>& src, size_t bytes) {
  std::atomic<int> ready{0};
  std::vector<double> begin(threads), end(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      begin[t] = NowUs();
      kernels::Copy(dst[t].data(), src[t].data(), bytes);
      end[t] = NowUs();
    });
  for (std::thread& th : pool) th.join();
  return *std::max_element(end.begin(), end.end()) - *std::min_element(begin.begin(), begin.end());
}

// How much more the machine's memory moves with every core copying beyond the LLC at once
// than with one (ComputeParams::dram_all_cores_gbps = this x the core's DRAM copy rate): one
// thread per core (at most kMaxMemoryThreads), each copying its own buffers of `bytes`, against
// one of them alone, alternating `reps` times (this VM's memory has fast and slow phases, so
// the two are compared within one), best of each, after an untimed pass that faults the pages
// in. Between 1 (one core saturates the bus) and the thread count; 0 with fewer than two
// cores.
constexpr int kMaxMemoryThreads = 16;
double AllCoresCopyGain(int cores, size_t bytes, int reps) {
  const int threads = std::min(cores, kMaxMemoryThreads);
  if (threads < 2 || bytes == 0) return 0;
  std::vector<std::vector<char>> dst(threads, std::vector<char>(bytes, 1)), src(threads, std::vector<char>(bytes, 2));
  ConcurrentCopyUs(threads, dst, src, bytes);
  double one = 1e300, all = 1e300;
  for (int rep = 0; rep < reps; ++rep) {
    one = std::min(one, ConcurrentCopyUs(1, dst, src, bytes));
    all = std::min(all, ConcurrentCopyUs(threads, dst, src, bytes));
  }
  const double gain = threads * one / std::max(all, 1e-3);
  return std::max(1.0, std::min(static_cast<double>(threads), gain));
}

// weft's own copy and float32 sum kernels beyond the LLC (3 buffers of one LLC, at most
// max_probe_bytes), then the cache a call can use (MeasureCacheBytes), then the kernels
// inside it (3 buffers of a sixth of it, at most LLC/8): what local steps run at.
ComputeMeasurement MeasureCompute(const Fabric& fabric, int rank, const CalibrateOptions& opt) {
  ComputeMeasurement c;
  double t0 = NowUs();
  int64_t llc = fabric.LlcBytes(fabric.rank(rank).host);
  // Three buffers of one LLC each: a working set of 3x the cache, at a third of the faulting
  // cost of 4x-LLC buffers (first touch dominates this probe's time).
  size_t dram = std::min<size_t>(llc > 0 ? static_cast<size_t>(llc) : 32u << 20, opt.max_probe_bytes);
  kernels::ReduceFn sum = kernels::GetReduceFn(weftFloat32, weftSum);
  // Best of `reps`: in-cache passes take tens of us, where one preemption halves a rate.
  auto rates = [&](size_t bytes, int reps, double* copy, double* reduce) {
    bytes &= ~static_cast<size_t>(63);
    std::vector<float> dst(bytes / 4, 1.0f), a(bytes / 4, 2.0f), b(bytes / 4, 3.0f);
    *copy = BestRate(bytes, [&] { kernels::Copy(dst.data(), a.data(), bytes); }, reps);
    *reduce = BestRate(bytes, [&] { sum(dst.data(), a.data(), b.data(), bytes / 4); }, reps);
  };
  rates(dram, 3, &c.dram_copy_gbps, &c.dram_reduce_gbps);
  // Each thread copies what the single core did up to 2 threads, less beyond (2 dram / T, at
  // least a quarter of it): the threads' buffers together stay beyond the LLC.
  const int cores = fabric.host(fabric.rank(rank).host).cores;
  const size_t threads = static_cast<size_t>(std::max(1, std::min(cores, kMaxMemoryThreads)));
  const size_t per_thread = std::min(dram, std::max(dram / 4, 2 * dram / threads)) & ~static_cast<size_t>(63);
  c.dram_all_cores_gbps = AllCoresCopyGain(cores, per_thread, 5) * c.dram_copy_gbps;
  if (llc > 0) c.cache_bytes = MeasureCacheBytes(llc, c.dram_copy_gbps, opt);
  int64_t cache = c.cache_bytes > 0 ? c.cache_bytes : (llc > 0 ? llc : int64_t{8} << 20);
  size_t cached = std::max<size_t>(64u << 10, static_cast<size_t>(cache) / 6);
  if (llc > 0) cached = std::min(cached, static_cast<size_t>(llc) / 8);
  rates(cached, 15, &c.copy_gbps, &c.reduce_gbps);
  // Two LLCs of input: the encodings and decoded values add to a working set well beyond it.
  c.codecs = MeasureCodecRates(2 * dram / sizeof(float));
  c.seconds = (NowUs() - t0) / 1e6;
  return c;
}

// Rank 0 measures its host's kernels (when it is a CPU rank) while the others wait in the
// allgather that then hands everyone its figures.
Status CalibrateCompute(const Fabric& fabric, const CalibrationPeers& peers, const CalibrateOptions& opt,
                        ComputeMeasurement* out) {
  constexpr int kScalars = 7, kPerCodec = 4;
  constexpr int kFields = kScalars + kPerCodec * ComputeParams::kCodecSlots;
  double mine[kFields] = {};
  if (peers.rank == 0 && !fabric.IsGpu(0)) {
    ComputeMeasurement c = MeasureCompute(fabric, 0, opt);
    double v[kScalars] = {c.copy_gbps, c.reduce_gbps, c.dram_copy_gbps, c.dram_reduce_gbps,
                          static_cast<double>(c.cache_bytes), c.seconds, c.dram_all_cores_gbps};
    std::copy(v, v + kScalars, mine);
    for (int k = 0; k < ComputeParams::kCodecSlots; ++k) {
      const ComputeParams::CodecRates& r = c.codecs[k];
      const double rates[kPerCodec] = {r.encode_gbps, r.decode_gbps, r.encode_cache_gbps, r.decode_cache_gbps};
      std::copy(rates, rates + kPerCodec, mine + kScalars + kPerCodec * k);
    }
  }
  std::vector<double> all(static_cast<size_t>(kFields) * peers.nranks);
  WEFT_RETURN_IF_ERROR_CTX(peers.allgather(mine, sizeof(mine), all.data()), "sharing compute calibration");
  *out = ComputeMeasurement{all[0], all[1], all[2], all[3], static_cast<int64_t>(all[4]), all[5], all[6]};
  for (int k = 0; k < ComputeParams::kCodecSlots; ++k) {
    const double* r = all.data() + kScalars + kPerCodec * k;
    out->codecs[k] = {r[0], r[1], r[2], r[3]};
  }
  return OkStatus();
}

// Measured codec rates into the table; a negative or non-finite one is refused by codec.
Status ApplyCodecRates(const ComputeMeasurement& compute, ComputeParams* cpu) {
  for (int k = 0; k < ComputeParams::kCodecSlots; ++k) {
    const ComputeParams::CodecRates& r = compute.codecs[k];
    for (double v : {r.encode_gbps, r.decode_gbps, r.encode_cache_gbps, r.decode_cache_gbps})
      if (!(v >= 0) || !std::isfinite(v))
        return InvalidArgument(std::string("calibration of the ") + weftCodecName(static_cast<weftCodec_t>(k)) +
                               " codec: measured rate " + std::to_string(v) + " GB/s must be >= 0 (0 = not measured)");
    if (r.encode_gbps > 0 && r.decode_gbps > 0) cpu->codecs[k] = r;
  }
  return OkStatus();
}

std::string DescribeCodecRates(const CodecRateTable& codecs) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  for (int k = 0; k < ComputeParams::kCodecSlots; ++k) {
    const ComputeParams::CodecRates& r = codecs[k];
    if (!(r.encode_gbps > 0)) continue;
    o << (o.tellp() > 0 ? ", " : "codecs (rank 0, GB/s of float32 encoded/decoded beyond the LLC | in cache): ")
      << weftCodecName(static_cast<weftCodec_t>(k)) << " " << r.encode_gbps << "/" << r.decode_gbps << " | "
      << r.encode_cache_gbps << "/" << r.decode_cache_gbps;
  }
  return o.str();
}

// Gradient-like values, codec_bench's shape (top-k's selection time depends on how many
// values share their top bits): near-Gaussian as the sum of a xorshift's four 16-bit
// uniforms (std::normal_distribution would cost more than the probe), one in 1000 a 100x
// outlier.
std::vector<float> ProbeValues(size_t count) {
  std::vector<float> v(count);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < count; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const uint64_t sum = (x & 0xFFFF) + ((x >> 16) & 0xFFFF) + ((x >> 32) & 0xFFFF) + (x >> 48);
    const float g = (static_cast<float>(sum) - 131070.0f) * (1.0f / 37837.0f);  // sd 1
    v[i] = i % 1000 == 7 ? 100.0f * g : g;
  }
  return v;
}

}  // namespace

CodecRateTable MeasureCodecRates(size_t dram_values) {
  CodecRateTable out{};
  constexpr size_t kCacheValues = 64u << 10;
  // Top-k's chains do not tile: each encode selects over a whole piece (exec/codec_chain.h,
  // 4 MiB), which the LLC holds. At 64 Ki values its 16384 samples are a quarter of the input
  // and the rate measured the sampling (7.4 GB/s against 12.9 beyond the LLC).
  constexpr size_t kTopKPieceValues = 1u << 20;
  const size_t n = std::max({dram_values, kCacheValues, kTopKPieceValues});
  const std::vector<float> values = ProbeValues(n);
  std::vector<float> decoded(n);
  std::vector<uint8_t> encoded;
  for (int k = weftCodecBf16; k < ComputeParams::kCodecSlots; ++k) {
    weftCompression spec;
    if (weftCompressionDefault(static_cast<weftCodec_t>(k), &spec) != weftSuccess) continue;
    encoded.resize(std::max(encoded.size(), codec::EncodedBytes(spec, n)));
    // Beyond the LLC a decode is a call's final write of a large output, which the executor
    // streams (codec::DecodeValuesStreamed); in the cache, a chain's plain decode.
    auto rate = [&](size_t count, int reps, bool encode) {
      return BestRate(count * sizeof(float), [&] {
        if (encode) codec::Encode(spec, values.data(), count, encoded.data(), 0);
        else if (count == n) codec::DecodeValuesStreamed(spec, encoded.data(), count, weftFloat32, decoded.data());
        else codec::Decode(spec, encoded.data(), count, decoded.data());
      }, reps);
    };
    ComputeParams::CodecRates& r = out[k];
    // Best of 3 beyond the LLC: 2 left a slow phase of the VM in (sign1's decode 19.7 GB/s in
    // one calibration, 24.7 in the next), and the model's 1-bit prediction moved 18% with it.
    r.encode_gbps = rate(n, 3, true);  // the decode below reads this encoding
    r.decode_gbps = rate(n, 3, false);
    const size_t cached = k == weftCodecTopK ? kTopKPieceValues : kCacheValues;
    r.encode_cache_gbps = rate(cached, 9, true);
    r.decode_cache_gbps = rate(cached, 9, false);
  }
  return out;
}

int64_t FitCacheBytes(const std::vector<std::pair<double, double>>& points, double dram_gbps, int64_t llc) {
  double cache_gbps = 0;
  for (const auto& [ws, rate] : points) cache_gbps = std::max(cache_gbps, rate);
  if (!(cache_gbps > 0) || !(dram_gbps > 0) || cache_gbps <= 1.25 * dram_gbps) return llc;
  // Sizes clearly spilled but clearly above DRAM carry the fit; a cliff with none between
  // puts the cache at the last working set still at the cache rate.
  std::vector<double> fits;
  double last_fast = 0;
  for (const auto& [ws, rate] : points) {
    if (rate >= 0.9 * cache_gbps) { last_fast = std::max(last_fast, ws); continue; }
    if (rate <= 1.1 * dram_gbps) continue;
    double hit = (1 / rate - 1 / dram_gbps) / (1 / cache_gbps - 1 / dram_gbps);
    fits.push_back(hit * ws);
  }
  double cache = last_fast;
  if (!fits.empty()) {
    std::sort(fits.begin(), fits.end());
    cache = fits[fits.size() / 2];
  } else if (last_fast >= points.back().first) {
    return llc;  // never spilled within the sweep
  }
  if (cache <= 0) return llc;
  return std::min<int64_t>(llc, static_cast<int64_t>(cache));
}

StatusOr<bool> CalibrationRequested() {
  // The settings facility's flag words (0/1, off/on, false/true, no/yes), as every flag.
  return SettingFlag("WEFT_CALIBRATE", false);
}

std::vector<TierMeasurement> CalibrationTiers(const Fabric& fabric, bool shm_enabled) {
  std::vector<TierMeasurement> tiers;
  std::set<LinkType> seen;
  auto consider = [&](int a, int b) {
    LinkType t = fabric.Link(a, b, shm_enabled);
    if (t == LinkType::kSelf || !seen.insert(t).second) return;
    TierMeasurement m;
    m.type = t;
    m.a = a;
    m.b = b;
    tiers.push_back(m);
  };
  // Rank 0 against everyone, then neighbours: linear in the rank count, and every tier that
  // exists between consecutive ranks or from rank 0 is found (hosts are contiguous blocks).
  const int n = fabric.nranks();
  for (int b = 1; b < n; ++b) consider(0, b);
  for (int a = 1; a + 1 < n; ++a) consider(a, a + 1);
  return tiers;
}

StatusOr<CalibrationResult> CalibrateFabric(std::shared_ptr<const Fabric> fabric, const CalibrationPeers& peers,
                                            const CalibrateOptions& options) {
  if (!fabric || fabric->nranks() != peers.nranks || static_cast<int>(peers.peer_transport.size()) != peers.nranks ||
      peers.rank < 0 || peers.rank >= peers.nranks || !peers.allgather)
    return InvalidArgument("CalibrateFabric: fabric, rank=" + std::to_string(peers.rank) + ", nranks=" +
                           std::to_string(peers.nranks) + " and the transports must describe the same job");
  if (options.min_probe_bytes < 4096 || options.max_probe_bytes < 4 * options.min_probe_bytes ||
      options.target_ms <= 0 || options.latency_round_trips < 1 || options.timeout_s <= 0)
    return InvalidArgument("CalibrateFabric: options out of range (min_probe_bytes >= 4096, max_probe_bytes >= "
                           "4 x min_probe_bytes, target_ms > 0, latency_round_trips >= 1, timeout_s > 0)");
  double t0 = NowUs();
  CalibrationResult result;
  result.tiers = CalibrationTiers(*fabric, peers.shm_enabled);
  WEFT_RETURN_IF_ERROR(CalibrateCompute(*fabric, peers, options, &result.compute));
  // The memory tiers' in-cache probes size themselves by the cache just measured.
  WEFT_ASSIGN_OR_RETURN(std::shared_ptr<const Fabric> sized, ApplyCalibration(*fabric, {}, result.compute));
  for (TierMeasurement& m : result.tiers) WEFT_RETURN_IF_ERROR(RunTier(*sized, peers, options, &m));
  WEFT_RETURN_IF_ERROR(ShareMeasurements(peers, &result.tiers));
  WEFT_ASSIGN_OR_RETURN(result.fabric, ApplyCalibration(*fabric, result.tiers, result.compute));
  result.seconds = (NowUs() - t0) / 1e6;
  return result;
}

StatusOr<std::shared_ptr<const Fabric>> ApplyCalibration(const Fabric& fabric,
                                                         const std::vector<TierMeasurement>& tiers,
                                                         const ComputeMeasurement& compute) {
  LinkTable table = fabric.table();
  const double rates[5] = {compute.copy_gbps, compute.reduce_gbps, compute.dram_copy_gbps, compute.dram_reduce_gbps,
                           compute.dram_all_cores_gbps};
  for (double r : rates)
    if (!(r >= 0) || !std::isfinite(r))
      return InvalidArgument("calibration of the CPU kernels: measured rate " + std::to_string(r) +
                             " GB/s must be >= 0 (0 = not measured)");
  ComputeParams& cpu = table.mutable_cpu();
  if (compute.copy_gbps > 0) cpu.copy_gbps = compute.copy_gbps;
  if (compute.reduce_gbps > 0) cpu.reduce_gbps = compute.reduce_gbps;
  if (compute.dram_copy_gbps > 0) cpu.dram_copy_gbps = compute.dram_copy_gbps;
  if (compute.dram_reduce_gbps > 0) cpu.dram_reduce_gbps = compute.dram_reduce_gbps;
  if (compute.dram_all_cores_gbps > 0) cpu.dram_all_cores_gbps = compute.dram_all_cores_gbps;
  WEFT_RETURN_IF_ERROR(ApplyCodecRates(compute, &cpu));
  std::vector<HostInfo> hosts;
  std::vector<RankPlacement> ranks;
  if (compute.cache_bytes < 0)
    return InvalidArgument("calibration of the CPU kernels: measured cache " + std::to_string(compute.cache_bytes) +
                           " bytes must be >= 0 (0 = not measured)");
  for (int h = 0; h < fabric.nhosts(); ++h) hosts.push_back(fabric.host(h));
  for (int r = 0; r < fabric.nranks(); ++r) ranks.push_back(fabric.rank(r));
  // Rank 0's host stands for every host, as its kernel rates do (a job's hosts are alike).
  if (compute.cache_bytes > 0)
    for (HostInfo& h : hosts) h.cache_bytes = compute.cache_bytes;
  for (const TierMeasurement& m : tiers) {
    if (!(m.gbps > 0) || !(m.oneway_us >= 0) || !(m.dram_gbps >= 0) || !std::isfinite(m.gbps) ||
        !std::isfinite(m.oneway_us) || !(m.burst_bytes >= 0) || !std::isfinite(m.burst_bytes) ||
        !(m.stack_cpu_gbps >= 0) || !std::isfinite(m.stack_cpu_gbps) || !(m.dram_sink_gbps >= 0) ||
        !std::isfinite(m.dram_sink_gbps))
      return InvalidArgument(std::string("calibration of tier ") + LinkTypeName(m.type) + ": measured " +
                             std::to_string(m.gbps) + " GB/s, " + std::to_string(m.oneway_us) +
                             " us one way, burst " + std::to_string(m.burst_bytes) + " B, stack CPU " +
                             std::to_string(m.stack_cpu_gbps) + " GB/s, into a sink " +
                             std::to_string(m.dram_sink_gbps) +
                             " GB/s: rates must be > 0 (stack CPU and sink >= 0), times and bursts >= 0");
    LinkParams& p = table.mutable_link(m.type);
    // The engine charges overhead + latency per message: the measured one-way time is both.
    p.latency_us = std::max(0.0, m.oneway_us - p.overhead_us);
    p.flow_gbps = m.gbps;
    p.bw_gbps = std::max(p.bw_gbps, m.gbps);
    p.measured = true;
    if (IsMemoryTier(m.type) && m.dram_gbps > 0) {
      p.dram_flow_gbps = m.dram_gbps;
      p.dram_bw_gbps = std::max(p.dram_bw_gbps, m.dram_gbps);
      p.dram_sink_flow_gbps = m.dram_sink_gbps;
    }
    if (IsNetworkTier(m.type)) {
      // A shaped or virtual NIC: one stream's measured rate is the port (the NIC resources
      // carry it, so ranks sharing a host's link share the rate).
      p.bw_gbps = m.gbps;
      // The hosts' NIC ports carry the bucket (fabric.cc reads the network entry's burst).
      p.burst_bytes = m.burst_bytes;
      p.stack_cpu_gbps = m.stack_cpu_gbps;
      for (HostInfo& h : hosts)
        for (NicInfo& nic : h.nics) nic.gbps = m.gbps;
    }
  }
  std::string name = fabric.name().rfind("calibrated", 0) == 0 ? fabric.name() : "calibrated:" + fabric.name();
  return std::shared_ptr<const Fabric>(
      std::make_shared<Fabric>(std::move(hosts), std::move(ranks), table, fabric.network(), name));
}

std::string CalibrationResult::Describe() const {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(3);
  for (const TierMeasurement& m : tiers) {
    o << LinkTypeName(m.type) << " (rank " << m.a << " -> " << m.b << "): one-way " << m.oneway_us << " us, "
      << m.gbps << " GB/s";
    if (m.dram_gbps > 0) o << " (beyond the LLC: " << m.dram_gbps << " GB/s";
    if (m.dram_gbps > 0 && m.dram_sink_gbps > 0) o << ", into the cache " << m.dram_sink_gbps << " GB/s";
    if (m.dram_gbps > 0) o << ")";
    if (m.burst_bytes > 0) o << ", token-bucket burst " << m.burst_bytes / 1e3 << " kB";
    if (m.stack_cpu_gbps > 0) o << ", stack CPU " << m.stack_cpu_gbps << " GB/s per core and end";
    o << ", probes up to " << m.probe_bytes / (1 << 20) << " MiB (repeats within " << m.spread << "x), "
      << m.seconds * 1e3 << " ms\n";
  }
  if (compute.copy_gbps > 0)
    o << "cpu kernels (rank 0): copy " << compute.copy_gbps << " GB/s, float sum " << compute.reduce_gbps
      << " GB/s (beyond the LLC: " << compute.dram_copy_gbps << ", " << compute.dram_reduce_gbps << " GB/s), "
      << "cache a call can use " << compute.cache_bytes / 1024 << " KiB";
  if (compute.dram_all_cores_gbps > 0) o << ", every core copying at once " << compute.dram_all_cores_gbps << " GB/s";
  if (compute.copy_gbps > 0) o << ", " << compute.seconds * 1e3 << " ms\n";
  const std::string codecs = DescribeCodecRates(compute.codecs);
  if (!codecs.empty()) o << codecs << "\n";
  o << "calibration took " << seconds * 1e3 << " ms\n";
  return o.str();
}

}  // namespace weft
