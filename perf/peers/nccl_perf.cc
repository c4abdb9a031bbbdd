// nccl-perf — the NCCL peer of weft-perf for GPU runs: same options, same rows
// (perf/perf_driver.h), buffers in device memory.
//
// libcudart and libnccl.so.2 are loaded with dlopen, so this builds wherever CUDA's headers
// exist and runs wherever the libraries do; with no GPU (or no NCCL) it prints one
// "# no GPU: NCCL peer skipped (<why>)" line and exits 0.
// Ranks: one per process from WEFT_RANK / WEFT_WORLD_SIZE / WEFT_LOCAL_RANK (the NCCL unique id
// travels through a file /tmp/nccl-perf-<WEFT_SECRET>.id), or -t N ranks on N GPUs as threads
// (ncclCommInitAll). All-to-all is grouped ncclSend/ncclRecv, as nccl-tests does.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "perf/perf_driver.h"

namespace {

// The part of nccl.h used here (ABI-stable since NCCL 2.0; enums match perf_driver.h).
typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;

struct Api {
  cudaError_t (*GetDeviceCount)(int*);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*Malloc)(void**, size_t);
  cudaError_t (*Free)(void*);
  cudaError_t (*Memcpy)(void*, const void*, size_t, cudaMemcpyKind);
  cudaError_t (*StreamCreate)(cudaStream_t*);
  cudaError_t (*StreamSynchronize)(cudaStream_t);
  const char* (*GetErrorString)(cudaError_t);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*GetVersion)(int*);
  const char* (*ErrorString)(ncclResult_t);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, int, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
};
Api api;

template <typename F>
bool Load(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

// Loads both libraries; returns why not, or an empty string.
std::string LoadApi() {
  void* cudart = nullptr;
  for (const char* n : {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"})
    if ((cudart = dlopen(n, RTLD_NOW | RTLD_GLOBAL))) break;
  if (!cudart) return "libcudart not found";
  bool ok = Load(cudart, "cudaGetDeviceCount", &api.GetDeviceCount) &&
            Load(cudart, "cudaSetDevice", &api.SetDevice) &&
            Load(cudart, "cudaMalloc", &api.Malloc) && Load(cudart, "cudaFree", &api.Free) &&
            Load(cudart, "cudaMemcpy", &api.Memcpy) &&
            Load(cudart, "cudaStreamCreate", &api.StreamCreate) &&
            Load(cudart, "cudaStreamSynchronize", &api.StreamSynchronize) &&
            Load(cudart, "cudaGetErrorString", &api.GetErrorString);
  if (!ok) return "libcudart lacks a needed symbol";
  int ndev = 0;
  cudaError_t e = api.GetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0)
    return std::string("cudaGetDeviceCount: ") + (e != cudaSuccess ? api.GetErrorString(e) : "0");
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (!nccl) return std::string("dlopen(libnccl.so.2): ") + dlerror();
  ok = Load(nccl, "ncclGetUniqueId", &api.GetUniqueId) &&
       Load(nccl, "ncclCommInitRank", &api.CommInitRank) &&
       Load(nccl, "ncclCommInitAll", &api.CommInitAll) &&
       Load(nccl, "ncclCommDestroy", &api.CommDestroy) &&
       Load(nccl, "ncclGetVersion", &api.GetVersion) &&
       Load(nccl, "ncclGetErrorString", &api.ErrorString) &&
       Load(nccl, "ncclAllReduce", &api.AllReduce) && Load(nccl, "ncclAllGather", &api.AllGather) &&
       Load(nccl, "ncclReduceScatter", &api.ReduceScatter) &&
       Load(nccl, "ncclBroadcast", &api.Broadcast) && Load(nccl, "ncclReduce", &api.Reduce) &&
       Load(nccl, "ncclSend", &api.Send) && Load(nccl, "ncclRecv", &api.Recv) &&
       Load(nccl, "ncclGroupStart", &api.GroupStart) && Load(nccl, "ncclGroupEnd", &api.GroupEnd);
  if (!ok) return "libnccl.so.2 lacks a needed symbol (NCCL >= 2.7 needed)";
  return "";
}

struct NcclContext {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  void* scratch = nullptr;  // 8 bytes for the driver's tiny allreduces
};
NcclContext* Ctx(perf_backend_t* b) { return static_cast<NcclContext*>(b->ctx); }

int NcclFail(ncclResult_t r, const char* what, char* err, size_t errlen) {
  if (r == 0) return 0;
  snprintf(err, errlen, "%s: %s", what, api.ErrorString(r));
  return 1;
}

int NcclRun(perf_backend_t* b, perf_coll_t coll, const void* send, void* recv, size_t count,
            perf_dtype_t dtype, perf_op_t op, int root, char* err, size_t errlen) {
  NcclContext* c = Ctx(b);
  const int t = dtype, o = op, n = b->nranks, rank = b->rank;
  const size_t bytes = count * perf_type_sizes[dtype];
  switch (coll) {
    case PERF_ALLREDUCE:
      return NcclFail(api.AllReduce(send, recv, count, t, o, c->comm, c->stream), "ncclAllReduce",
                      err, errlen);
    case PERF_ALLGATHER:
      return NcclFail(api.AllGather(send, recv, count, t, c->comm, c->stream), "ncclAllGather",
                      err, errlen);
    case PERF_REDUCESCATTER:
      return NcclFail(api.ReduceScatter(send, recv, count, t, o, c->comm, c->stream),
                      "ncclReduceScatter", err, errlen);
    case PERF_BROADCAST:
      return NcclFail(api.Broadcast(send, recv, count, t, root, c->comm, c->stream),
                      "ncclBroadcast", err, errlen);
    case PERF_REDUCE:
      return NcclFail(api.Reduce(send, recv, count, t, o, root, c->comm, c->stream), "ncclReduce",
                      err, errlen);
    case PERF_ALLTOALL: {
      ncclResult_t r = api.GroupStart();
      for (int p = 0; p < n && r == 0; ++p) {
        r = api.Send(static_cast<const char*>(send) + p * bytes, count, t, p, c->comm, c->stream);
        if (r == 0)
          r = api.Recv(static_cast<char*>(recv) + p * bytes, count, t, p, c->comm, c->stream);
      }
      ncclResult_t r2 = api.GroupEnd();
      return NcclFail(r ? r : r2, "ncclSend/ncclRecv (alltoall)", err, errlen);
    }
    case PERF_SENDRECV: {
      ncclResult_t r = api.GroupStart();
      if (r == 0) r = api.Send(send, count, t, (rank + 1) % n, c->comm, c->stream);
      if (r == 0) r = api.Recv(recv, count, t, (rank + n - 1) % n, c->comm, c->stream);
      ncclResult_t r2 = api.GroupEnd();
      return NcclFail(r ? r : r2, "ncclSend/ncclRecv", err, errlen);
    }
    default: snprintf(err, errlen, "unknown collective"); return 1;
  }
}

int NcclSync(perf_backend_t* b) {
  cudaError_t e = api.StreamSynchronize(Ctx(b)->stream);
  if (e != cudaSuccess) fprintf(stderr, "cudaStreamSynchronize: %s\n", api.GetErrorString(e));
  return e != cudaSuccess;
}

int SmallAllReduce(perf_backend_t* b, void* v, int dtype, int op) {
  NcclContext* c = Ctx(b);
  if (api.Memcpy(c->scratch, v, 8, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
  if (api.AllReduce(c->scratch, c->scratch, 1, dtype, op, c->comm, c->stream) != 0) return 1;
  if (NcclSync(b)) return 1;
  return api.Memcpy(v, c->scratch, 8, cudaMemcpyDeviceToHost) != cudaSuccess;
}
int NcclMaxDouble(perf_backend_t* b, double* v) { return SmallAllReduce(b, v, PERF_DOUBLE, PERF_MAX); }
int NcclSumInt64(perf_backend_t* b, int64_t* v) { return SmallAllReduce(b, v, PERF_INT64, PERF_SUM); }
int NcclBarrier(perf_backend_t* b) {
  double v = 0;
  return NcclMaxDouble(b, &v);
}
void* NcclAlloc(perf_backend_t* b, size_t bytes) {
  void* p = nullptr;
  return api.Malloc(&p, bytes) == cudaSuccess ? p : nullptr;
}
void NcclRelease(perf_backend_t* b, void* p) { api.Free(p); }
int NcclUpload(perf_backend_t* b, void* dst, const void* src, size_t n) {
  return api.Memcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess;
}
int NcclDownload(perf_backend_t* b, void* dst, const void* src, size_t n) {
  return api.Memcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}
int NcclInplaceOk(perf_backend_t* b, perf_coll_t coll) {
  return coll != PERF_SENDRECV && coll != PERF_ALLTOALL;
}
const char* NcclAlgo(perf_backend_t* b, perf_coll_t coll, size_t bytes) { return "nccl"; }

int RunRank(NcclContext* ctx, int rank, int nranks, const perf_options_t* o,
            const std::string& description) {
  api.SetDevice(ctx->device);
  if (api.StreamCreate(&ctx->stream) != cudaSuccess || api.Malloc(&ctx->scratch, 8) != cudaSuccess)
    return 2;
  perf_backend_t b;
  memset(&b, 0, sizeof b);
  b.name = "nccl";
  b.ctx = ctx;
  b.rank = rank;
  b.nranks = nranks;
  b.run = NcclRun;
  b.barrier = NcclBarrier;
  b.allreduce_max_double = NcclMaxDouble;
  b.allreduce_sum_int64 = NcclSumInt64;
  b.algo_name = NcclAlgo;
  b.inplace_ok = NcclInplaceOk;
  b.alloc = NcclAlloc;
  b.release = NcclRelease;
  b.upload = NcclUpload;
  b.download = NcclDownload;
  b.sync = NcclSync;
  b.description = description.c_str();
  int rc = perf_run(&b, o);
  api.Free(ctx->scratch);
  return rc;
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
  std::string why = LoadApi();
  if (!why.empty()) {
    printf("# no GPU: NCCL peer skipped (%s)\n", why.c_str());
    return 0;
  }
  int version = 0, ndev = 0;
  api.GetVersion(&version);
  api.GetDeviceCount(&ndev);
  const std::string description = "NCCL " + std::to_string(version) + ", " +
                                  std::to_string(ndev) + " visible GPU(s), device buffers";

  if (o.threads > 0) {
    std::vector<ncclComm_t> comms(o.threads);
    std::vector<int> devs(o.threads);
    for (int i = 0; i < o.threads; ++i) devs[i] = i % ndev;
    ncclResult_t r = api.CommInitAll(comms.data(), o.threads, devs.data());
    if (r != 0) {
      fprintf(stderr, "nccl-perf: ncclCommInitAll(%d): %s\n", o.threads, api.ErrorString(r));
      return 2;
    }
    std::vector<NcclContext> ctxs(o.threads);
    std::vector<int> rcs(o.threads);
    std::vector<std::thread> threads;
    for (int i = 0; i < o.threads; ++i) {
      ctxs[i].comm = comms[i];
      ctxs[i].device = devs[i];
      threads.emplace_back([&, i] { rcs[i] = RunRank(&ctxs[i], i, o.threads, &o, description); });
    }
    int rc = 0;
    for (int i = 0; i < o.threads; ++i) {
      threads[i].join();
      if (rcs[i] > rc) rc = rcs[i];
    }
    for (auto c : comms) api.CommDestroy(c);
    return rc;
  }

  const int rank = EnvInt("WEFT_RANK", 0), size = EnvInt("WEFT_WORLD_SIZE", 1);
  NcclContext ctx;
  ctx.device = EnvInt("WEFT_LOCAL_RANK", 0) % ndev;
  api.SetDevice(ctx.device);
  ncclUniqueId id;
  const char* secret = getenv("WEFT_SECRET");
  if (size > 1 && !secret) {
    fprintf(stderr, "nccl-perf: %d ranks need WEFT_SECRET (weftrun sets it)\n", size);
    return 2;
  }
  std::string path = std::string("/tmp/nccl-perf-") + (secret ? secret : "single") + ".id";
  if (rank == 0) {
    api.GetUniqueId(&id);
    std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 ||
        rename(tmp.c_str(), path.c_str()) != 0) {
      fprintf(stderr, "nccl-perf: cannot write %s\n", path.c_str());
      return 2;
    }
  } else {
    // Rank 0 publishes the id by an atomic rename; wait for it, but not forever.
    bool got = false;
    for (int i = 0; i < 6000 && !got; ++i) {
      FILE* f = fopen(path.c_str(), "rb");
      if (f) {
        got = fread(&id, sizeof id, 1, f) == 1;
        fclose(f);
      }
      if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!got) {
      fprintf(stderr, "nccl-perf rank %d: no unique id in %s after 60 s\n", rank, path.c_str());
      return 2;
    }
  }
  ncclResult_t r = api.CommInitRank(&ctx.comm, size, id, rank);
  if (rank == 0) remove(path.c_str());
  if (r != 0) {
    fprintf(stderr, "nccl-perf rank %d: ncclCommInitRank: %s\n", rank, api.ErrorString(r));
    return 2;
  }
  int rc = RunRank(&ctx, rank, size, &o, description);
  api.CommDestroy(ctx.comm);
  return rc;
}
