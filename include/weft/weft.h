/*
 * weft — topology-aware collective communication.
 *
 * Public C API. Names follow NCCL's with the prefix `nccl` replaced by `weft` and the same
 * argument order, so training code switches by renaming:
 *
 *   weftAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream)
 *
 * Buffers: host memory (this release). A `weftStream_t` is an opaque pointer: for host
 * buffers, NULL means "blocking" (the call returns when the collective is complete), and a
 * stream from weftStreamCreate() gives ordered asynchronous host work (the call enqueues and
 * returns; weftStreamSynchronize waits). For device buffers it will be a cudaStream_t.
 *
 * Errors: every call returns a weftResult_t; weftGetLastError() returns a message for the
 * last failing call on this thread naming the argument and value or the peer and step.
 * The library never prints to stdout, never exits the process; logging goes to stderr only
 * when WEFT_DEBUG is set (WARN, INFO, TRACE).
 *
 * Thread safety: a communicator may be used by one thread at a time (as NCCL). Different
 * communicators may be used concurrently from different threads.
 */
#ifndef WEFT_WEFT_H_
#define WEFT_WEFT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define WEFT_API
#else
#define WEFT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MAJOR 0
#define WEFT_MINOR 1
#define WEFT_PATCH 0
#define WEFT_VERSION_CODE (WEFT_MAJOR * 10000 + WEFT_MINOR * 100 + WEFT_PATCH)

/** Opaque communicator handle. */
typedef struct weftComm* weftComm_t;

/** Opaque stream. NULL with host buffers = blocking. */
typedef void* weftStream_t;

#define WEFT_UNIQUE_ID_BYTES 128
/** Root address + port + 128-bit secret; pass it to every rank out of band (as NCCL). */
typedef struct {
  char internal[WEFT_UNIQUE_ID_BYTES];
} weftUniqueId;

typedef enum {
  weftSuccess = 0,
  weftUnhandledCudaError = 1,
  weftSystemError = 2,
  weftInternalError = 3,
  weftInvalidArgument = 4,
  weftInvalidUsage = 5,
  weftRemoteError = 6,
  weftInProgress = 7,
  weftTimeout = 8,
  weftNumResults = 9
} weftResult_t;

typedef enum {
  weftInt8 = 0,
  weftChar = 0,
  weftUint8 = 1,
  weftInt32 = 2,
  weftInt = 2,
  weftUint32 = 3,
  weftInt64 = 4,
  weftUint64 = 5,
  weftFloat16 = 6,
  weftHalf = 6,
  weftFloat32 = 7,
  weftFloat = 7,
  weftFloat64 = 8,
  weftDouble = 8,
  weftBfloat16 = 9,
  weftFloat8e4m3 = 10, /* reserved: not yet accepted by collectives */
  weftFloat8e5m2 = 11, /* reserved: not yet accepted by collectives */
  weftNumTypes = 12
} weftDataType_t;

typedef enum {
  weftSum = 0,
  weftProd = 1,
  weftMax = 2,
  weftMin = 3,
  weftAvg = 4,
  weftNumOps = 5
} weftRedOp_t;

/** Color for weftCommSplit meaning "this rank joins no new communicator". */
#define WEFT_SPLIT_NOCOLOR (-1)

/* ---- errors and version ---- */

/** Human-readable name of a result code. Never NULL. */
WEFT_API const char* weftGetErrorString(weftResult_t result);
/** Message of the last failing call made by this thread (or by the comm's init). Never NULL. */
WEFT_API const char* weftGetLastError(weftComm_t comm);
WEFT_API weftResult_t weftGetVersion(int* version);

/* ---- communicator ---- */

/** Creates a unique id: opens the rendezvous listener on this process (the root). */
WEFT_API weftResult_t weftGetUniqueId(weftUniqueId* uniqueId);
/** Collective over nranks processes/threads sharing commId; blocks until all joined. */
WEFT_API weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId commId, int rank);
/** Creates ndev ranks in this process (thread-per-rank tests). devlist is ignored for host. */
WEFT_API weftResult_t weftCommInitAll(weftComm_t* comms, int ndev, const int* devlist);
/**
 * Initializes from the launcher's environment: WEFT_RANK, WEFT_WORLD_SIZE, WEFT_LOCAL_RANK,
 * WEFT_ROOT (host:port); else torchrun's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT;
 * else Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (+ WEFT_ROOT or MASTER_ADDR/PORT);
 * else Open MPI's OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK (+ WEFT_ROOT or MASTER_ADDR/PORT).
 * The secret is taken from WEFT_SECRET (32 hex digits) when set; all ranks must agree.
 */
WEFT_API weftResult_t weftCommInitFromEnv(weftComm_t* comm);
/** Splits comm by color (WEFT_SPLIT_NOCOLOR: *newcomm = NULL), ordered by key then rank. */
WEFT_API weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t* newcomm);
/** Waits for nothing outstanding, closes connections and frees. NULL is accepted. */
WEFT_API weftResult_t weftCommDestroy(weftComm_t comm);
/** Aborts outstanding operations, closes connections and frees, without waiting for peers. */
WEFT_API weftResult_t weftCommAbort(weftComm_t comm);
WEFT_API weftResult_t weftCommCount(const weftComm_t comm, int* count);
WEFT_API weftResult_t weftCommUserRank(const weftComm_t comm, int* rank);
/** The first asynchronous error on this communicator (a failed stream operation), or success. */
WEFT_API weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError);
/** Per-communicator timeout in seconds (0 = never); defaults to WEFT_TIMEOUT or 300 s. */
WEFT_API weftResult_t weftCommSetTimeout(weftComm_t comm, double seconds);

/* ---- fault tolerance (NCCL 2.27-2.29's revoke, shrink and grow; src/core/elastic.h) ---- */

/** weftCommShrink's flags. */
#define WEFT_SHRINK_DEFAULT 0x00 /* nothing may be in flight on comm */
#define WEFT_SHRINK_ABORT 0x01   /* revoke comm first: in-flight operations fail, then shrink */

/**
 * Stops the operations in flight on comm, and later ones, on this rank and on every rank that
 * can still be reached: they fail with weftRemoteError, the message saying which rank
 * "revoked the communicator"; comm keeps its resources, so that weftCommShrink and
 * weftCommDestroy can follow. revokeFlags must be 0. Any thread.
 */
WEFT_API weftResult_t weftCommRevoke(weftComm_t comm, int revokeFlags);
/**
 * Creates *newcomm from the ranks of comm that are not excluded, renumbered in order of their
 * rank in comm. Every survivor calls it; the excluded ranks do not (they may be dead, rank 0
 * and the rendezvous root included: survivors meet on listeners each rank opened at creation,
 * with no help from outside the job). Survivors may pass different lists: they agree on the
 * union, plus any rank found dead on the way, and all return the same communicator. A rank
 * that another survivor's list excludes gets weftInvalidUsage and *newcomm = NULL.
 * shrinkFlags: WEFT_SHRINK_DEFAULT or WEFT_SHRINK_ABORT (revoke comm first). Process
 * communicators only (weftCommInitAll's threads: weftInvalidUsage).
 */
WEFT_API weftResult_t weftCommShrink(weftComm_t comm, const int* excludeRanks, int excludeCount,
                                     weftComm_t* newcomm, int shrinkFlags);
/**
 * weft extension: the ranks of comm this rank knows or was told have failed (a dead process
 * or connection, the rank a peer's failure report named, the rank a timeout blamed), in
 * increasing order: the first min(*count, maxRanks) land in ranks; *count is how many there
 * are. What to pass to weftCommShrink.
 */
WEFT_API weftResult_t weftCommFailedRanks(weftComm_t comm, int* ranks, int maxRanks, int* count);
/**
 * An id for growing comm (weftCommGrow): one existing rank calls it and hands the id to the
 * new processes out of band; the rendezvous it names runs in this process.
 */
WEFT_API weftResult_t weftCommGetUniqueId(weftComm_t comm, weftUniqueId* uniqueId);
/**
 * Grows to nRanks: existing ranks pass comm (uniqueId may be NULL: it travels over comm from
 * the rank that created it; rank is ignored, they keep theirs), new ranks pass comm = NULL,
 * the id and their rank in [size of comm, nRanks). Collective over all of them.
 */
WEFT_API weftResult_t weftCommGrow(weftComm_t comm, int nRanks, const weftUniqueId* uniqueId, int rank,
                                   weftComm_t* newcomm);

/**
 * weft extension: the algorithm the last collective on comm ran (e.g. "ring", "oneshot"),
 * as chosen by WEFT_ALGO or the selector. "" before the first collective. The string stays
 * valid until the next collective on comm.
 */
WEFT_API weftResult_t weftCommGetLastAlgorithm(weftComm_t comm, const char** name);

/* ---- collectives (count = elements per rank, as NCCL) ---- */

WEFT_API weftResult_t weftAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                    weftStream_t stream);
/** recvbuff holds nranks*sendcount elements; rank r's data lands at r*sendcount. */
WEFT_API weftResult_t weftAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    weftDataType_t datatype, weftComm_t comm,
                                    weftStream_t stream);
/** sendbuff holds nranks*recvcount elements; rank r receives the reduced slice r. */
WEFT_API weftResult_t weftReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        weftDataType_t datatype, weftRedOp_t op,
                                        weftComm_t comm, weftStream_t stream);
WEFT_API weftResult_t weftBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                    weftDataType_t datatype, int root, weftComm_t comm,
                                    weftStream_t stream);
/** recvbuff is only written on root (may be NULL elsewhere). */
WEFT_API weftResult_t weftReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 weftDataType_t datatype, weftRedOp_t op, int root,
                                 weftComm_t comm, weftStream_t stream);
/** sendbuff and recvbuff hold nranks*count elements; block p goes to / comes from rank p. */
WEFT_API weftResult_t weftAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                   weftDataType_t datatype, weftComm_t comm,
                                   weftStream_t stream);
/** Per-peer counts and displacements (in elements), as MPI_Alltoallv; MoE token dispatch. */
WEFT_API weftResult_t weftAllToAllv(const void* sendbuff, const size_t* sendcounts,
                                    const size_t* sdispls, void* recvbuff,
                                    const size_t* recvcounts, const size_t* rdispls,
                                    weftDataType_t datatype, weftComm_t comm,
                                    weftStream_t stream);
WEFT_API weftResult_t weftSend(const void* sendbuff, size_t count, weftDataType_t datatype,
                               int peer, weftComm_t comm, weftStream_t stream);
WEFT_API weftResult_t weftRecv(void* recvbuff, size_t count, weftDataType_t datatype, int peer,
                               weftComm_t comm, weftStream_t stream);
/** All ranks reach the barrier before any leaves it. */
WEFT_API weftResult_t weftBarrier(weftComm_t comm, weftStream_t stream);

/**
 * Group calls: between weftGroupStart and weftGroupEnd, weftSend/weftRecv (and collectives)
 * are queued and issued together at weftGroupEnd, so that matched send/recv pairs between
 * ranks cannot deadlock (as ncclGroupStart/End). Groups nest.
 */
WEFT_API weftResult_t weftGroupStart(void);
WEFT_API weftResult_t weftGroupEnd(void);

/* ---- host streams ---- */

/** An ordered queue of host operations executed by a worker thread. */
WEFT_API weftResult_t weftStreamCreate(weftStream_t* stream);
/** Waits for every operation enqueued so far; returns the first error among them. */
WEFT_API weftResult_t weftStreamSynchronize(weftStream_t stream);
/** weftSuccess when idle, weftInProgress while work is pending, or the first error. */
WEFT_API weftResult_t weftStreamQuery(weftStream_t stream);
WEFT_API weftResult_t weftStreamDestroy(weftStream_t stream);

/* ---- registered memory: zero-copy collectives on one host ---- */

/**
 * Allocates size (> 0) bytes of host memory that the other processes of this host can map
 * (as ncclMemAlloc): page-aligned, zero-filled, backed by an anonymous memory file, so nothing
 * is left behind when the process exits. Free it with weftMemFree.
 */
WEFT_API weftResult_t weftMemAlloc(void** ptr, size_t size);
/** Frees memory from weftMemAlloc (anything else, or a second free: weftInvalidArgument). */
WEFT_API weftResult_t weftMemFree(void* ptr);
/**
 * Registers buff[0, size) with comm for its collectives (as ncclCommRegister). Collective:
 * every rank registers, in the same order (each rank its own buffer). When every rank's buffer
 * comes from weftMemAlloc and all ranks share a host, allreduce, allgather, reduce-scatter and
 * (out of place) all-to-all calls of at least 256 KiB whose send and receive buffers lie in
 * registered memory on every rank read the peers' buffers in place (no staging copy through shared windows;
 * weftCommGetLastAlgorithm then ends in "+zerocopy"). Other buffers may be registered too (no
 * effect: calls on them copy as unregistered calls do). *handle is for weftCommDeregister.
 */
WEFT_API weftResult_t weftCommRegister(const weftComm_t comm, void* buff, size_t size,
                                       void** handle);
/**
 * Ends a registration on this rank (local: later calls on the buffer take the staging path).
 * Peers keep their mapping of the buffer until the communicator is destroyed.
 */
WEFT_API weftResult_t weftCommDeregister(const weftComm_t comm, void* handle);

/** Size in bytes of one element of datatype, or 0 for an unknown type. */
WEFT_API size_t weftTypeSize(weftDataType_t datatype);

/* ---- per-rank counts (MPI_Allgatherv / MPI_Reduce_scatter semantics; counts in elements) ---- */

/**
 * Allgather with a count per rank: rank q contributes recvcounts[q] elements, which land at
 * element offset displs[q] of every rank's recvbuff (blocks must not overlap; gaps between them
 * are left untouched). sendcount must equal recvcounts[rank]; zero counts are allowed. Every
 * rank must pass the same recvcounts (checked: a rank that differs fails the call on every
 * rank); displs may differ between ranks (each describes its own recvbuff). In place:
 * sendbuff == recvbuff + displs[rank] elements.
 */
WEFT_API weftResult_t weftAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff,
                                     const size_t* recvcounts, const size_t* displs,
                                     weftDataType_t datatype, weftComm_t comm,
                                     weftStream_t stream);
/**
 * Reduce-scatter with a count per rank: sendbuff holds sum(recvcounts) elements; rank r
 * receives recvcounts[r] elements, its block (at element offset sum(recvcounts[0..r)) of
 * sendbuff) reduced over all ranks. Every rank must pass the same recvcounts (checked as for
 * weftAllGatherV); zero counts are allowed. In place: recvbuff == sendbuff + that offset.
 */
WEFT_API weftResult_t weftReduceScatterV(const void* sendbuff, void* recvbuff,
                                         const size_t* recvcounts, weftDataType_t datatype,
                                         weftRedOp_t op, weftComm_t comm, weftStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_WEFT_H_ */
