// gloo-perf — the Gloo peer of weft-perf: same options, same rows (perf/perf_driver.h).
//
// Ranks come from WEFT_RANK / WEFT_WORLD_SIZE, so `weftrun -n N gloo-perf ...` and
// perf/netns/run.sh launch it like weft-perf. Rendezvous: gloo::rendezvous::FileStore in
// $GLOO_STORE_DIR, else /tmp/gloo-perf-<WEFT_SECRET> (every rank here shares /tmp, also across
// the network namespaces of perf/netns). Transport: Gloo's TCP device on
// $WEFT_SOCKET_IFNAME when set (as weft), else 127.0.0.1.
//
// Collectives (the column "algo" says which ran):
//   allreduce      gloo::allreduce (AllreduceOptions, RING — what PyTorch's ProcessGroupGloo
//                  calls), or --algo bcube | ring_chunked | halving_doubling (the older
//                  in-place algorithm classes; out of place = copy + in place, timed)
//   allgather      gloo::allgather          alltoall   gloo::alltoall
//   reducescatter  gloo::ReduceScatterHalvingDoubling (in place on the full buffer;
//                  result at the buffer start; out of place = copy in + run + copy out, timed)
//   broadcast      gloo::broadcast          reduce     gloo::reduce
//   sendrecv       unbound buffers, ring (to rank+1, from rank-1)
// Gloo has no avg: sum, then a local division inside the timed call.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "perf/perf_driver.h"

namespace {

struct GlooState {
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::string allreduce_algo = "ring";
  // The older algorithm classes bind one buffer and count at construction (which also
  // registers buffers with the pairs), so they are built on first use and reused while the
  // (buffer, count) stays the same — as Gloo's own benchmark does.
  std::unique_ptr<gloo::Algorithm> cached;
  const void* cached_ptr = nullptr;
  size_t cached_count = 0;
  std::vector<char> scratch;  // reduce-scatter out of place: the full n*count buffer
  uint32_t tag = 0;
};

GlooState* State(perf_backend_t* b) { return static_cast<GlooState*>(b->ctx); }

template <typename T>
void DivideBy(void* buf, size_t count, int n) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
}
template <>
void DivideBy<gloo::float16>(void* buf, size_t count, int n) {
  auto* p = static_cast<gloo::float16*>(buf);
  for (size_t i = 0; i < count; ++i)
    p[i] = gloo::cpu_float2half_rn(gloo::cpu_half2float(p[i]) / static_cast<float>(n));
}

// gloo/math.h overloads each function (pointer and buffer forms): pick the 4-argument one.
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn NewApiReduce(perf_op_t op) {
  switch (op) {
    case PERF_PROD: return static_cast<ReduceFn>(&gloo::product<T>);
    case PERF_MAX: return static_cast<ReduceFn>(&gloo::max<T>);
    case PERF_MIN: return static_cast<ReduceFn>(&gloo::min<T>);
    default: return static_cast<ReduceFn>(&gloo::sum<T>);  // sum, avg
  }
}

template <typename T>
const gloo::ReductionFunction<T>* OldApiReduce(perf_op_t op) {
  switch (op) {
    case PERF_PROD: return gloo::ReductionFunction<T>::product;
    case PERF_MAX: return gloo::ReductionFunction<T>::max;
    case PERF_MIN: return gloo::ReductionFunction<T>::min;
    default: return gloo::ReductionFunction<T>::sum;
  }
}

template <typename T>
void RunTyped(perf_backend_t* b, perf_coll_t coll, const void* send_, void* recv_, size_t count,
              perf_op_t op, int root) {
  GlooState* st = State(b);
  auto& ctx = st->context;
  const int n = b->nranks, rank = b->rank;
  T* send = static_cast<T*>(const_cast<void*>(send_));
  T* recv = static_cast<T*>(recv_);
  const bool inplace = send_ == recv_;
  // Gloo divides by the element count in places (allgather raises SIGFPE on 0): nothing to
  // move is nothing to do.
  if (count == 0) return;
  switch (coll) {
    case PERF_ALLREDUCE: {
      if (st->allreduce_algo == "ring" || st->allreduce_algo == "bcube") {
        gloo::AllreduceOptions opts(ctx);
        opts.setAlgorithm(st->allreduce_algo == "ring" ? gloo::AllreduceOptions::Algorithm::RING
                                                       : gloo::AllreduceOptions::Algorithm::BCUBE);
        if (!inplace) opts.setInput(send, count);
        opts.setOutput(recv, count);
        opts.setReduceFunction(NewApiReduce<T>(op));
        opts.setTag(st->tag);
        gloo::allreduce(opts);
      } else {
        if (!inplace) memcpy(static_cast<void*>(recv), send, count * sizeof(T));
        if (!st->cached || st->cached_ptr != recv || st->cached_count != count) {
          st->cached.reset();
          std::vector<T*> ptrs{recv};
          if (st->allreduce_algo == "ring_chunked")
            st->cached.reset(new gloo::AllreduceRingChunked<T>(ctx, ptrs, static_cast<int>(count),
                                                               OldApiReduce<T>(op)));
          else
            st->cached.reset(new gloo::AllreduceHalvingDoubling<T>(
                ctx, ptrs, static_cast<int>(count), OldApiReduce<T>(op)));
          st->cached_ptr = recv;
          st->cached_count = count;
        }
        st->cached->run();
      }
      if (op == PERF_AVG) DivideBy<T>(recv, count, n);
      return;
    }
    case PERF_ALLGATHER: {
      gloo::AllgatherOptions opts(ctx);
      // In place (my block already at recv + rank*count): Gloo takes "no input" to mean that.
      if (send != recv + static_cast<size_t>(rank) * count) opts.setInput(send, count);
      opts.setOutput(recv, count * n);
      opts.setTag(st->tag);
      gloo::allgather(opts);
      return;
    }
    case PERF_REDUCESCATTER: {
      const bool ip = recv == send + static_cast<size_t>(rank) * count;
      T* full = send;
      if (!ip) {
        st->scratch.resize(count * n * sizeof(T));
        full = reinterpret_cast<T*>(st->scratch.data());
        memcpy(static_cast<void*>(full), send, count * n * sizeof(T));
      }
      if (!st->cached || st->cached_ptr != full || st->cached_count != count) {
        st->cached.reset();
        std::vector<T*> ptrs{full};
        std::vector<int> elems(n, static_cast<int>(count));
        st->cached.reset(new gloo::ReduceScatterHalvingDoubling<T>(
            ctx, ptrs, static_cast<int>(count * n), elems, OldApiReduce<T>(op)));
        st->cached_ptr = full;
        st->cached_count = count;
      }
      st->cached->run();
      // Gloo leaves every rank's result at the start of the full buffer (as MPI's in place
      // does): move it to this rank's slice (in place) or to the output.
      if (recv != full) memmove(static_cast<void*>(recv), full, count * sizeof(T));
      if (op == PERF_AVG) DivideBy<T>(recv, count, n);
      return;
    }
    case PERF_ALLTOALL: {
      if (inplace) throw std::runtime_error("gloo::alltoall has no in-place form");
      gloo::AlltoallOptions opts(ctx);
      opts.setInput(send, count * n);
      opts.setOutput(recv, count * n);
      opts.setTag(st->tag);
      gloo::alltoall(opts);
      return;
    }
    case PERF_BROADCAST: {
      gloo::BroadcastOptions opts(ctx);
      if (rank == root && !inplace) opts.setInput(send, count);
      opts.setOutput(recv, count);
      opts.setRoot(root);
      opts.setTag(st->tag);
      gloo::broadcast(opts);
      return;
    }
    case PERF_REDUCE: {
      gloo::ReduceOptions opts(ctx);
      if (!inplace) opts.setInput(send, count);
      opts.setOutput(recv, count);
      opts.setRoot(root);
      opts.setReduceFunction(NewApiReduce<T>(op));
      opts.setTag(st->tag);
      gloo::reduce(opts);
      if (op == PERF_AVG && rank == root) DivideBy<T>(recv, count, n);
      return;
    }
    case PERF_SENDRECV: {
      if (n == 1) {  // Gloo has no pair to itself
        memcpy(static_cast<void*>(recv), send, count * sizeof(T));
        return;
      }
      auto sbuf = ctx->createUnboundBuffer(send, count * sizeof(T));
      auto rbuf = ctx->createUnboundBuffer(recv, count * sizeof(T));
      const uint64_t slot = gloo::Slot::build(0x70, st->tag);
      rbuf->recv((rank + n - 1) % n, slot);
      sbuf->send((rank + 1) % n, slot);
      sbuf->waitSend();
      rbuf->waitRecv();
      return;
    }
    default: throw std::runtime_error("unknown collective");
  }
}

int GlooRun(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv, size_t count,
            perf_dtype_t dtype, perf_op_t op, int root, char* err, size_t errlen) {
  try {
    switch (dtype) {
      case PERF_INT8: RunTyped<int8_t>(b, coll, send, recv, count, op, root); break;
      case PERF_UINT8: RunTyped<uint8_t>(b, coll, send, recv, count, op, root); break;
      case PERF_INT32: RunTyped<int32_t>(b, coll, send, recv, count, op, root); break;
      case PERF_INT64: RunTyped<int64_t>(b, coll, send, recv, count, op, root); break;
      case PERF_UINT64: RunTyped<uint64_t>(b, coll, send, recv, count, op, root); break;
      case PERF_HALF: RunTyped<gloo::float16>(b, coll, send, recv, count, op, root); break;
      case PERF_FLOAT: RunTyped<float>(b, coll, send, recv, count, op, root); break;
      case PERF_DOUBLE: RunTyped<double>(b, coll, send, recv, count, op, root); break;
      default:
        snprintf(err, errlen, "-d %s: not supported by the Gloo peer", perf_type_names[dtype]);
        return 1;
    }
  } catch (const std::exception& e) {
    snprintf(err, errlen, "gloo: %s", e.what());
    return 1;
  }
  return 0;
}

const char* GlooUnsupported(perf_backend_t* b, perf_coll_t coll, perf_dtype_t dtype,
                            perf_op_t op) {
  if (dtype == PERF_UINT32 || dtype == PERF_BF16)
    return "-d uint32/bfloat16: not supported by the Gloo peer";
  const std::string& a = State(b)->allreduce_algo;
  if (a != "ring" && a != "bcube" && a != "ring_chunked" && a != "halving_doubling")
    return "--algo: allreduce algorithms are ring bcube ring_chunked halving_doubling";
  return nullptr;
}

int GlooInplaceOk(perf_backend_t* b, perf_coll_t coll) {
  return coll != PERF_SENDRECV && coll != PERF_ALLTOALL;
}

const char* GlooAlgo(perf_backend_t* b, perf_coll_t coll, size_t bytes) {
  switch (coll) {
    case PERF_ALLREDUCE: return State(b)->allreduce_algo.c_str();
    case PERF_REDUCESCATTER: return "halving_doubling";
    case PERF_ALLGATHER: return "allgather(ring)";
    case PERF_ALLTOALL: return "alltoall";
    case PERF_BROADCAST: return "broadcast(one_to_all)";
    case PERF_REDUCE: return "reduce(ring)";
    default: return "send/recv";
  }
}

// Collective helpers for the driver: small, so the new API's ring is fine.
int GlooBarrier(perf_backend_t* b) {
  double v = 0;
  return b->allreduce_max_double(b, &v);
}
int GlooMaxDouble(perf_backend_t* b, double* v) {
  try {
    gloo::AllreduceOptions opts(State(b)->context);
    opts.setOutput(v, 1);
    opts.setReduceFunction(NewApiReduce<double>(PERF_MAX));
    opts.setTag(1);
    gloo::allreduce(opts);
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "[gloo rank %d] allreduce(max): %s\n", b->rank, e.what());
    return 1;
  }
}
int GlooSumInt64(perf_backend_t* b, int64_t* v) {
  try {
    gloo::AllreduceOptions opts(State(b)->context);
    opts.setOutput(v, 1);
    opts.setReduceFunction(NewApiReduce<int64_t>(PERF_SUM));
    opts.setTag(2);
    gloo::allreduce(opts);
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "[gloo rank %d] allreduce(sum): %s\n", b->rank, e.what());
    return 1;
  }
}

int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  perf_options_t o;
  int prc = perf_parse_options(argc, argv, &o);
  if (prc != 0) return prc > 0 ? 0 : 2;
  if (o.threads > 1) {
    fprintf(stderr, "gloo-perf: -t is not supported (launch with weftrun -n N)\n");
    return 2;
  }
  const int rank = EnvInt("WEFT_RANK", 0), size = EnvInt("WEFT_WORLD_SIZE", 1);
  std::string dir;
  if (const char* d = getenv("GLOO_STORE_DIR")) {
    dir = d;
  } else if (const char* secret = getenv("WEFT_SECRET")) {
    dir = std::string("/tmp/gloo-perf-") + secret;
  } else if (size == 1) {
    dir = "/tmp/gloo-perf-single-" + std::to_string(getpid());
  } else {
    fprintf(stderr, "gloo-perf: set WEFT_SECRET (weftrun does) or GLOO_STORE_DIR so the %d "
                    "ranks find one rendezvous directory\n", size);
    return 2;
  }
  mkdir(dir.c_str(), 0700);

  GlooState st;
  std::string description;
  int rc = 2;
  try {
    gloo::transport::tcp::attr attr;
    const char* ifname = getenv("WEFT_SOCKET_IFNAME");
    if (ifname && *ifname)
      attr.iface = ifname;
    else
      attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    st.context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    st.context->setTimeout(std::chrono::seconds(EnvInt("WEFT_TIMEOUT", 300)));
    st.context->connectFullMesh(store, dev);
    if (o.algo) st.allreduce_algo = o.algo;
    description = "Gloo (Debian libgloo " + std::to_string(GLOO_VERSION_MAJOR) + "." +
                  std::to_string(GLOO_VERSION_MINOR) + "), TCP on " +
                  (ifname && *ifname ? std::string(ifname) : std::string("127.0.0.1")) +
                  ", allreduce " + st.allreduce_algo;
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo-perf rank %d: rendezvous in %s: %s\n", rank, dir.c_str(), e.what());
    return 2;
  }

  perf_backend_t b;
  memset(&b, 0, sizeof b);
  b.name = "gloo";
  b.ctx = &st;
  b.rank = rank;
  b.nranks = size;
  b.run = GlooRun;
  b.barrier = GlooBarrier;
  b.allreduce_max_double = GlooMaxDouble;
  b.allreduce_sum_int64 = GlooSumInt64;
  b.algo_name = GlooAlgo;
  b.unsupported = GlooUnsupported;
  b.inplace_ok = GlooInplaceOk;
  b.description = description.c_str();
  rc = perf_run(&b, &o);
  // Everyone is past the rendezvous once the sweep ends: the last rank out removes the store.
  if (rc != 2) {
    GlooBarrier(&b);
    if (rank == 0) {
      std::string cmd = "rm -rf '" + dir + "'";
      if (system(cmd.c_str()) != 0) fprintf(stderr, "gloo-perf: could not remove %s\n", dir.c_str());
    }
  }
  st.cached.reset();
  return rc;
}
