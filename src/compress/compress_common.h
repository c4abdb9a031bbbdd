// Shared pieces of the compressed collectives (src/compress/compressed_*.cc): argument checks,
// moving user data (float32 or bf16) in and out of float32 working buffers with the caller's
// residual, slice arithmetic, per-thread scratch, and turning a failed public call into a
// Status with weftGetLastError's message.
//
// Every compressed collective runs a compressed schedule (encode and decode steps the checker
// proves: compressed_schedule.h): the flat and the hierarchical allreduce, the reduce-scatter,
// the allgather and the all-to-all(v). FlatAllReduceToEncoded (compressed_collectives.h) still
// composes public collectives, as the reference the flat schedule is compared with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "algorithms/compressed.h"  // ElementRange
#include "common/status.h"
#include "core/device_calls.h"  // WorkExtent, StagingMap: device buffers run staged
#include "weft/weft_compress.h"

namespace weft::compress {

// Checks shared by every compressed collective. op is checked only when has_op.
// `elements` is the count each buffer holds (for the NULL checks).
Status CheckCompressedCall(weftComm_t comm, weftDataType_t datatype, bool has_op, weftRedOp_t op,
                           const weftCompression* spec, const void* sendbuff, size_t send_elements,
                           const void* recvbuff, size_t recv_elements);

// Rank count and rank of comm (through the public API).
Status CommShape(weftComm_t comm, int* nranks, int* rank);

// Runs `call` now (NULL stream), or queues it on the host stream, where it runs on the stream's
// worker after the stream's earlier work and before its later work, as any collective queued
// there; its error then sticks to the stream (weftStreamSynchronize/Query). Arguments must be
// checked before: what reaches the stream is the call alone. A handle that is not a host
// stream fails naming it.
Status RunOnStream(weftStream_t stream, std::function<Status()> call);

// Where a compressed call runs. Host buffers: as RunOnStream. Any device buffer (or a device
// stream): staged on that stream (core/device_calls.h, StageHostWork): the device extents are
// copied to pinned host memory, the host codecs run there on the communicator's progress
// thread, the written extents are copied back, in stream order. `call` receives the map from
// each buffer to where it lives for the work (itself, for host memory).
Status RunCompressedCall(weftComm_t comm, weftStream_t stream, const char* what,
                         const std::vector<WorkExtent>& extents,
                         std::function<Status(const StagingMap&)> call);

// A public call's result as a Status carrying weftGetLastError's message.
Status FromResult(weftResult_t result, const char* what, weftComm_t comm);

// out[i] = float(in[i]) + (residual ? residual[i] : 0), in being float32 or bf16.
void LoadWithResidual(const void* in, weftDataType_t datatype, size_t count,
                      const float* residual, float* out);
// The same with a residual that this call takes over: out[i] = float(in[i]) + residual[i], then
// residual[i] = 0 outside `stored` (sorted, disjoint ranges the call's feedback overwrites on
// success: compressed_schedule.h StoredRanges), in one pass over float32 data. The zeroing
// writes only 1 KiB blocks that hold a nonzero: in the steady state the residual outside this
// rank's spans is zero already, and the pass then only reads it (no write-back of 4 bytes an
// element). On a failed call the stored ranges keep their residual, which the call's result,
// never delivered, did not consume.
void TakeResidual(const void* in, weftDataType_t datatype, size_t count, float* residual,
                  float* out, const std::vector<ElementRange>& stored);
// Whether every bit of residual[0, count) outside `ranges` (sorted, disjoint) is zero: a
// read-only pass over those elements, stopping at the first nonzero block.
bool ResidualZeroOutside(const float* residual, size_t count, const std::vector<ElementRange>& ranges);
// out[i] = values[i] as datatype (bf16: rounded to nearest even).
void StoreAs(const float* values, size_t count, weftDataType_t datatype, void* out);
size_t ElementBytes(weftDataType_t datatype);

// Slice r of count split over nranks: the first count % nranks slices hold one more.
size_t SliceCount(size_t count, int nranks, int r);
size_t SliceOffset(size_t count, int nranks, int r);

// Per-thread scratch that only grows (thread-per-rank tests keep one per rank). Slots 0-3:
// the flat collectives; 4-7: the hierarchical allreduce, which calls the flat one in between.
constexpr int kScratchSlots = 8;
float* ScratchFloats(int slot, size_t count);
uint8_t* ScratchBytes(int slot, size_t count);

// Encodes values, and when residual is given stores there what the encoding dropped.
void EncodeWithFeedback(const weftCompression& spec, const float* values, size_t count,
                        uint8_t* encoded, uint64_t stream, float* residual);

}  // namespace weft::compress
