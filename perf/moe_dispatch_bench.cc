// perf/moe_dispatch_bench.cc — issue 39's MoE goal: the time of the token dispatch
// all-to-all(v) with fp8 tokens against bf16 tokens (and float32), for a MoE shape (default
// 4096 tokens per rank x 2048 hidden, top-2 of 64 experts with skewed popularity, so the
// per-peer counts are uneven). Run under any launcher weftCommInitFromEnv knows (weftrun,
// perf/netns/run.sh); perf/netns/moe_dispatch.sh runs it on the 2 Gbit/s namespace hosts.
//
// A token goes once to every rank holding one of its experts (DeepEP's dispatch: a rank
// receives the token once even when two of its experts were chosen). Modes:
//   f32      weftAllToAllv on float32 tokens (uncompressed)
//   bf16     weftAllToAllv on bf16 tokens: the baseline of the goal (DeepEP's bf16 dispatch)
//   fp8      weftAllToAllvCompressed, bf16 tokens -> fp8 e4m3 (one scale per 128 values)
//   fp8f32   the same from float32 tokens (the trainer's --compress-dispatch fp8)
//   bf16enc  weftAllToAllvCompressed, float32 tokens -> weftCodecBf16 (the trainer's combine)
// Each round runs every mode once, in turn (the VM has fast and slow phases, so modes
// alternate instead of running back to back); a round's time of a mode is the slowest rank's,
// behind a barrier. Every mode's first call (untimed) is checked against the tokens the
// sender generated: exact for f32 and bf16, within the codec's bound otherwise.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <weft/weft.h>
#include <weft/weft_compress.h>

namespace {

struct Options {
  size_t tokens = 4096;   // per rank
  size_t hidden = 2048;
  int topk = 2;
  int experts = 64;       // in all; a multiple of the rank count
  double skew = 1.0;      // expert popularity ~ 1 / (place + 1)^skew
  int rounds = 5;
  int ranks_per_host = 0; // 0: all ranks on one host
  double rate_gbit = 0;   // link rate for the wire-bound column (0: none)
  uint64_t seed = 1;
  std::vector<std::string> modes = {"f32", "bf16", "fp8", "fp8f32", "bf16enc"};
};

// The token rows of one rank's call: per destination (send) and per source (recv).
struct Plan {
  std::vector<size_t> send_rows, recv_rows;
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  // elements
};

struct Mode {
  std::string name;
  weftDataType_t input;           // what the tokens are in memory
  const weftCompression* codec;   // null: plain weftAllToAllv
  double tolerance;               // relative to the row's absmax (0: exact)
};

bool Fail(const char* what, weftResult_t r, weftComm_t comm) {
  if (r == weftSuccess) return false;
  std::fprintf(stderr, "moe_dispatch_bench: %s: %s (%s)\n", what, weftGetErrorString(r),
               weftGetLastError(comm));
  return true;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Reads a positive number; on failure names the option and the value.
bool Number(const char* name, const char* text, double min, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= min)) {
    std::fprintf(stderr, "moe_dispatch_bench: --%s '%s': want a number >= %g\n", name, text, min);
    return false;
  }
  *out = v;
  return true;
}

bool ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help" || i + 1 >= argc || a.rfind("--", 0) != 0) {
      std::fprintf(stderr,
                   "usage: moe_dispatch_bench [--tokens 4096] [--hidden 2048] [--topk 2] "
                   "[--experts 64] [--skew 1] [--rounds 5] [--ranks-per-host R] "
                   "[--rate-gbit G] [--seed S] [--modes f32,bf16,fp8,fp8f32,bf16enc]\n");
      return false;
    }
    const std::string name = a.substr(2);
    const char* v = argv[++i];
    double x = 0;
    if (name == "modes") { o->modes = SplitCommas(v); continue; }
    const double min = name == "skew" || name == "rate-gbit" || name == "seed" ? 0 : 1;
    if (!Number(name.c_str(), v, min, &x)) return false;
    if (name == "tokens") o->tokens = static_cast<size_t>(x);
    else if (name == "hidden") o->hidden = static_cast<size_t>(x);
    else if (name == "topk") o->topk = static_cast<int>(x);
    else if (name == "experts") o->experts = static_cast<int>(x);
    else if (name == "skew") o->skew = x;
    else if (name == "rounds") o->rounds = static_cast<int>(x);
    else if (name == "ranks-per-host") o->ranks_per_host = static_cast<int>(x);
    else if (name == "rate-gbit") o->rate_gbit = x;
    else if (name == "seed") o->seed = static_cast<uint64_t>(x);
    else {
      std::fprintf(stderr, "moe_dispatch_bench: unknown option '%s'\n", a.c_str());
      return false;
    }
  }
  return true;
}

bool CheckShape(const Options& o, int nranks) {
  const char* bad = nullptr;
  if (o.experts % nranks != 0) bad = "--experts must be a multiple of the rank count";
  else if (o.topk > o.experts) bad = "--topk must be <= --experts";
  else if (o.ranks_per_host < 0 || (o.ranks_per_host > 0 && nranks % o.ranks_per_host != 0))
    bad = "--ranks-per-host must divide the rank count";
  if (bad) std::fprintf(stderr, "moe_dispatch_bench: %s (experts %d, topk %d, ranks %d, "
                        "ranks per host %d)\n", bad, o.experts, o.topk, nranks, o.ranks_per_host);
  return bad == nullptr;
}

// Routing: every rank draws its tokens' top-k experts (distinct) from the same skewed
// popularity (a seeded permutation of the experts, weight 1 / (place + 1)^skew); a token is
// sent once to each rank holding one of its choices. Returns the rows per destination.
std::vector<size_t> Route(const Options& o, int nranks, int rank) {
  std::mt19937_64 shared(o.seed);
  std::vector<int> order(o.experts);
  for (int e = 0; e < o.experts; ++e) order[e] = e;
  std::shuffle(order.begin(), order.end(), shared);
  std::vector<double> weight(o.experts);
  for (int place = 0; place < o.experts; ++place)
    weight[order[place]] = 1.0 / std::pow(place + 1.0, o.skew);
  std::mt19937_64 mine(o.seed * 1000003 + rank + 1);
  const int per_rank = o.experts / nranks;
  std::vector<size_t> rows(nranks, 0);
  for (size_t t = 0; t < o.tokens; ++t) {
    std::vector<double> w = weight;
    std::vector<bool> to(nranks, false);
    for (int j = 0; j < o.topk; ++j) {
      std::discrete_distribution<int> pick(w.begin(), w.end());
      const int e = pick(mine);
      w[e] = 0.0;  // distinct experts
      to[e / per_rank] = true;
    }
    for (int r = 0; r < nranks; ++r) rows[r] += to[r];
  }
  return rows;
}

bool MakePlan(const Options& o, weftComm_t comm, int nranks, int rank, Plan* p) {
  p->send_rows = Route(o, nranks, rank);
  std::vector<uint64_t> out(p->send_rows.begin(), p->send_rows.end()), in(nranks);
  if (Fail("row counts (weftAllToAll)",
           weftAllToAll(out.data(), in.data(), 1, weftUint64, comm, nullptr), comm))
    return false;
  p->recv_rows.assign(in.begin(), in.end());
  size_t s = 0, r = 0;
  for (int q = 0; q < nranks; ++q) {
    p->send_counts.push_back(p->send_rows[q] * o.hidden);
    p->send_displs.push_back(s);
    s += p->send_counts.back();
    p->recv_counts.push_back(p->recv_rows[q] * o.hidden);
    p->recv_displs.push_back(r);
    r += p->recv_counts.back();
  }
  return true;
}

// Token value c of row j sent by src to dst: a hash spread over a few binades, so a row's
// values differ in magnitude as activations do. Receivers recompute it for the check.
float TokenValue(uint64_t seed, int src, int dst, size_t j, size_t c) {
  uint64_t x = seed ^ (static_cast<uint64_t>(src) << 56) ^ (static_cast<uint64_t>(dst) << 48) ^
               (static_cast<uint64_t>(j) << 20) ^ c;
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  const double u = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
  return static_cast<float>((u - 0.5) * std::ldexp(1.0, static_cast<int>(x & 7)));
}

uint16_t ToBf16(float f) {  // round to nearest even (no NaN among the tokens)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

namespace {

struct Buffers {
  std::vector<float> send_f32, recv_f32;
  std::vector<uint16_t> send_bf16, recv_bf16;
};

void FillTokens(const Options& o, const Plan& p, int nranks, int rank, Buffers* b) {
  size_t send_total = 0, recv_total = 0;
  for (int q = 0; q < nranks; ++q) send_total += p.send_counts[q], recv_total += p.recv_counts[q];
  b->send_f32.resize(std::max<size_t>(send_total, 1));
  b->send_bf16.resize(b->send_f32.size());
  b->recv_f32.assign(std::max<size_t>(recv_total, 1), 0.0f);
  b->recv_bf16.assign(b->recv_f32.size(), 0);
  for (int q = 0; q < nranks; ++q)
    for (size_t j = 0; j < p.send_rows[q]; ++j)
      for (size_t c = 0; c < o.hidden; ++c) {
        const size_t at = p.send_displs[q] + j * o.hidden + c;
        b->send_f32[at] = TokenValue(o.seed, rank, q, j, c);
        b->send_bf16[at] = ToBf16(b->send_f32[at]);
      }
}

bool Call(const Mode& m, const Plan& p, Buffers* b, weftComm_t comm) {
  const bool bf16 = m.input == weftBfloat16;
  const void* send = bf16 ? static_cast<const void*>(b->send_bf16.data()) : b->send_f32.data();
  void* recv = bf16 ? static_cast<void*>(b->recv_bf16.data()) : b->recv_f32.data();
  const weftResult_t r =
      m.codec ? weftAllToAllvCompressed(send, p.send_counts.data(), p.send_displs.data(), recv,
                                        p.recv_counts.data(), p.recv_displs.data(), m.input,
                                        m.codec, comm, nullptr)
              : weftAllToAllv(send, p.send_counts.data(), p.send_displs.data(), recv,
                              p.recv_counts.data(), p.recv_displs.data(), m.input, comm, nullptr);
  return !Fail(m.name.c_str(), r, comm);
}

// The worst error of the received tokens against what their senders generated (rounded to
// bf16 where the mode's tokens are bf16), relative to each row's largest magnitude; the
// mode's bound is per value (|err| <= tolerance x row absmax).
double CheckReceived(const Options& o, const Mode& m, const Plan& p, const Buffers& b,
                     int nranks, int rank) {
  const bool bf16 = m.input == weftBfloat16;
  double worst = 0.0;
  std::vector<float> want(o.hidden);
  for (int q = 0; q < nranks; ++q)
    for (size_t j = 0; j < p.recv_rows[q]; ++j) {
      double absmax = 0.0;
      for (size_t c = 0; c < o.hidden; ++c) {
        const float x = TokenValue(o.seed, q, rank, j, c);
        want[c] = bf16 ? FromBf16(ToBf16(x)) : x;
        absmax = std::max(absmax, std::fabs(static_cast<double>(want[c])));
      }
      const size_t at = p.recv_displs[q] + j * o.hidden;
      for (size_t c = 0; c < o.hidden; ++c) {
        const double got = bf16 ? FromBf16(b.recv_bf16[at + c]) : b.recv_f32[at + c];
        const double err = std::fabs(got - want[c]) / (absmax > 0 ? absmax : 1.0);
        if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : std::max(worst, err);
      }
    }
  return worst;
}

// Bytes this rank's call puts on the way to each rank (the codec's exact size per block).
std::vector<double> WireRow(const Mode& m, const Plan& p, int nranks) {
  std::vector<double> row(nranks, 0.0);
  const size_t elem = m.input == weftBfloat16 ? 2 : 4;
  for (int q = 0; q < nranks; ++q) {
    size_t bytes = p.send_counts[q] * elem;
    if (m.codec && p.send_counts[q] > 0 &&
        weftCompressedSize(m.codec, p.send_counts[q], &bytes) != weftSuccess)
      bytes = 0;
    row[q] = static_cast<double>(bytes);
  }
  return row;
}

struct Summary {
  double wire = 0, cross = 0;  // bytes to other ranks (all ranks); busiest host link direction
  std::vector<double> seconds;  // slowest rank's, per round
  double error = 0;
};

// Everybody's wire rows summed into the full matrix; the busiest host link direction.
bool WireSummary(const Options& o, const Mode& m, const Plan& p, int nranks, int rank,
                 weftComm_t comm, Summary* s) {
  std::vector<double> matrix(static_cast<size_t>(nranks) * nranks, 0.0);
  const std::vector<double> row = WireRow(m, p, nranks);
  std::copy(row.begin(), row.end(), matrix.begin() + static_cast<size_t>(rank) * nranks);
  if (Fail("wire matrix (weftAllReduce)", weftAllReduce(matrix.data(), matrix.data(),
           matrix.size(), weftFloat64, weftSum, comm, nullptr), comm))
    return false;
  const int rph = o.ranks_per_host > 0 ? o.ranks_per_host : nranks;
  std::vector<double> up(nranks / rph, 0.0), down(nranks / rph, 0.0);
  for (int a = 0; a < nranks; ++a)
    for (int c = 0; c < nranks; ++c) {
      if (a != c) s->wire += matrix[static_cast<size_t>(a) * nranks + c];
      if (a / rph == c / rph) continue;
      up[a / rph] += matrix[static_cast<size_t>(a) * nranks + c];
      down[c / rph] += matrix[static_cast<size_t>(a) * nranks + c];
    }
  for (size_t h = 0; h < up.size(); ++h) s->cross = std::max({s->cross, up[h], down[h]});
  return true;
}

bool MakeModes(const Options& o, std::vector<weftCompression>* specs, std::vector<Mode>* modes) {
  specs->resize(2);
  if (weftCompressionDefault(weftCodecFp8E4M3, &(*specs)[0]) != weftSuccess ||
      weftCompressionDefault(weftCodecBf16, &(*specs)[1]) != weftSuccess)
    return false;
  // Codec bounds (weft_compress.h) with slack for float arithmetic: fp8 e4m3 2^-4 |x| +
  // 2^-18 block absmax; bf16 2^-8 |x|. As a fraction of the row's absmax.
  const double fp8 = 0.0625 * 1.001 + 1e-5, bf16 = 0.00390625 * 1.001;
  for (const std::string& name : o.modes) {
    if (name == "f32") modes->push_back({name, weftFloat32, nullptr, 0.0});
    else if (name == "bf16") modes->push_back({name, weftBfloat16, nullptr, 0.0});
    else if (name == "fp8") modes->push_back({name, weftBfloat16, &(*specs)[0], fp8});
    else if (name == "fp8f32") modes->push_back({name, weftFloat32, &(*specs)[0], fp8});
    else if (name == "bf16enc") modes->push_back({name, weftFloat32, &(*specs)[1], bf16});
    else {
      std::fprintf(stderr, "moe_dispatch_bench: --modes: unknown mode '%s' (f32, bf16, fp8, "
                   "fp8f32, bf16enc)\n", name.c_str());
      return false;
    }
  }
  return !modes->empty();
}

}  // namespace

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One call of the mode behind a barrier; *seconds: the slowest rank's time.
bool TimedCall(const Mode& m, const Plan& p, Buffers* b, weftComm_t comm, double* seconds) {
  if (Fail("weftBarrier", weftBarrier(comm, nullptr), comm)) return false;
  const double t0 = Now();
  if (!Call(m, p, b, comm)) return false;
  double dt = Now() - t0;
  if (Fail("slowest rank (weftAllReduce)",
           weftAllReduce(&dt, &dt, 1, weftFloat64, weftMax, comm, nullptr), comm))
    return false;
  *seconds = dt;
  return true;
}

// Untimed first call of every mode, checked; then the rounds, modes in turn within each.
bool RunModes(const Options& o, const std::vector<Mode>& modes, const Plan& p, Buffers* b,
              int nranks, int rank, weftComm_t comm, std::vector<Summary>* out) {
  out->assign(modes.size(), Summary());
  for (size_t i = 0; i < modes.size(); ++i) {
    double ignored = 0;
    if (!WireSummary(o, modes[i], p, nranks, rank, comm, &(*out)[i]) ||
        !TimedCall(modes[i], p, b, comm, &ignored))
      return false;
    double err = CheckReceived(o, modes[i], p, *b, nranks, rank);
    if (Fail("worst error (weftAllReduce)",
             weftAllReduce(&err, &err, 1, weftFloat64, weftMax, comm, nullptr), comm))
      return false;
    (*out)[i].error = err;
  }
  for (int round = 0; round < o.rounds; ++round)
    for (size_t i = 0; i < modes.size(); ++i) {
      double s = 0;
      if (!TimedCall(modes[i], p, b, comm, &s)) return false;
      (*out)[i].seconds.push_back(s);
    }
  return true;
}

// The CPU floor of a codec on this machine: every rank at once (as in the call, they share the
// cores) encodes its send blocks and decodes them again, with no transfer; the slowest rank's
// time. The compressed call cannot take less than this unless the cores are free.
bool CodecFloor(const Plan& p, const weftCompression& spec, Buffers* b, int nranks,
                weftComm_t comm, double* seconds) {
  size_t most = 0;
  for (int q = 0; q < nranks; ++q) most = std::max(most, p.send_counts[q]);
  size_t bytes = 0;
  if (most == 0 || weftCompressedSize(&spec, most, &bytes) != weftSuccess) return most == 0;
  std::vector<unsigned char> enc(bytes);
  std::vector<float> dec(most);
  if (Fail("weftBarrier", weftBarrier(comm, nullptr), comm)) return false;
  const double t0 = Now();
  for (int q = 0; q < nranks; ++q) {
    if (p.send_counts[q] == 0) continue;
    if (weftEncode(&spec, b->send_f32.data() + p.send_displs[q], p.send_counts[q], enc.data(),
                   0) != weftSuccess ||
        weftDecode(&spec, enc.data(), p.send_counts[q], dec.data()) != weftSuccess)
      return !Fail("codec floor (weftEncode/weftDecode)", weftInvalidArgument, nullptr);
  }
  *seconds = Now() - t0;
  return !Fail("slowest rank (weftAllReduce)",
               weftAllReduce(seconds, seconds, 1, weftFloat64, weftMax, comm, nullptr), comm);
}

// Rank 0's table; returns whether every mode's tokens arrived within its bound.
bool Report(const Options& o, const std::vector<Mode>& modes, const std::vector<Summary>& s,
            const Plan& p, int nranks) {
  double bf16 = 0;
  for (size_t i = 0; i < modes.size(); ++i)
    if (modes[i].name == "bf16") bf16 = Median(s[i].seconds);
  size_t lo = SIZE_MAX, hi = 0;
  for (size_t r : p.send_rows) lo = std::min(lo, r), hi = std::max(hi, r);
  std::printf("# %d ranks (%d per host), %zu tokens x %zu hidden per rank, top-%d of %d experts "
              "(skew %g); rank 0 sends %zu..%zu rows per rank; %d rounds; link %g Gbit/s\n",
              nranks, o.ranks_per_host > 0 ? o.ranks_per_host : nranks, o.tokens, o.hidden, o.topk,
              o.experts, o.skew, lo, hi, o.rounds, o.rate_gbit);
  std::printf("%-8s %9s %10s %9s %9s %9s %9s %8s %8s  %s\n", "mode", "wire_MiB", "xhost_MiB",
              "bound_ms", "min_ms", "med_ms", "max_ms", "vs_bf16", "vs_bound", "check");
  bool ok = true;
  for (size_t i = 0; i < modes.size(); ++i) {
    const Summary& m = s[i];
    const double med = Median(m.seconds);
    const double bound = o.rate_gbit > 0 ? m.cross * 8 / (o.rate_gbit * 1e9) : 0;
    const bool good = m.error <= modes[i].tolerance;
    ok = ok && good;
    std::printf("%-8s %9.2f %10.2f %9.1f %9.1f %9.1f %9.1f %8.3f %8.3f  err %.3g %s\n",
                modes[i].name.c_str(), m.wire / 1048576.0, m.cross / 1048576.0, bound * 1e3,
                *std::min_element(m.seconds.begin(), m.seconds.end()) * 1e3, med * 1e3,
                *std::max_element(m.seconds.begin(), m.seconds.end()) * 1e3,
                bf16 > 0 ? med / bf16 : 0.0, bound > 0 ? med / bound : 0.0, m.error,
                good ? "ok" : "OUT OF BOUND");
  }
  std::printf("rounds (ms, slowest rank):");
  for (int r = 0; r < o.rounds; ++r) {
    std::printf(" |");
    for (size_t i = 0; i < modes.size(); ++i) std::printf(" %s %.1f", modes[i].name.c_str(),
                                                          s[i].seconds[r] * 1e3);
  }
  std::printf("\n");
  std::fflush(stdout);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseOptions(argc, argv, &o)) return 2;
  weftComm_t comm = nullptr;
  if (Fail("weftCommInitFromEnv", weftCommInitFromEnv(&comm), nullptr)) return 1;
  int nranks = 0, rank = 0;
  weftCommCount(comm, &nranks);
  weftCommUserRank(comm, &rank);
  std::vector<weftCompression> specs;
  std::vector<Mode> modes;
  Plan plan;
  Buffers buffers;
  std::vector<Summary> summary;
  bool ok = CheckShape(o, nranks) && MakeModes(o, &specs, &modes) &&
            MakePlan(o, comm, nranks, rank, &plan);
  if (ok) FillTokens(o, plan, nranks, rank, &buffers);
  ok = ok && RunModes(o, modes, plan, &buffers, nranks, rank, comm, &summary);
  double floor_fp8 = 0, floor_bf16 = 0;
  ok = ok && CodecFloor(plan, specs[0], &buffers, nranks, comm, &floor_fp8) &&
       CodecFloor(plan, specs[1], &buffers, nranks, comm, &floor_bf16);
  if (ok && rank == 0) {
    ok = Report(o, modes, summary, plan, nranks);
    std::printf("codec floor (every rank encodes + decodes its float32 send blocks at once, no "
                "transfer; slowest rank): fp8e4m3 %.1f ms, bf16 %.1f ms\n", floor_fp8 * 1e3,
                floor_bf16 * 1e3);
  }
  weftCommDestroy(comm);
  return ok ? 0 : 1;
}
