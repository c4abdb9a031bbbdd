// Registered buffers and zero-copy collectives (weftCommRegister / weftCommDeregister).
//
// Registration (collective: every rank of the communicator registers, in the same order, as
// NCCL requires for buffers its collectives read in place): each rank registers its buffer
// with its direct (shm) transport and packs a key; the keys are exchanged through the
// bootstrap, and every rank imports (maps) its same-host peers' keys. A buffer from
// weftMemAlloc is a memory file peers can map; any other buffer cannot be mapped, and the
// registration is kept but never read in place (calls on it take the staging path, exactly as
// unregistered calls). A second exchange tells every rank whether all ranks' buffers of this
// registration were mapped by all their peers ("usable"), so the answer is the same on every
// rank. Registration i has index i on every rank (deregistered entries keep their index).
//
// Per call (the communicator, before it chooses the plan): when any registration is usable and
// the call is a large allreduce / allgather / reduce-scatter / all-to-all (out of place on
// every rank), every rank publishes which
// registration and offset hold its input and output (DirectTransport::PublishCallInfo), runs
// one signal round, and reads every peer's record. Only if every rank's buffers are registered
// and usable does the call take the zero-copy schedule (ScheduleRequest::peer_buffers_mapped),
// identically on every rank; otherwise every rank takes the staging schedule.
//
// Deregistration is local: this rank's buffer is no longer published as registered (its later
// calls on it take the staging path). Peers keep their mapping of it until the communicator is
// destroyed (the memory stays allocated until then even after weftMemFree), so a peer can never
// read unmapped memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms/schedule.h"
#include "common/memref.h"
#include "common/status.h"
#include "exec/executor.h"

struct weftComm;

namespace weft {

// Calls smaller than this (the larger of input and output, bytes) never try zero-copy: the
// agreement's signal round (~1 us) would cost more than the staging copy saves.
constexpr size_t kZeroCopyMinBytes = size_t{256} << 10;

struct CommRegistration {
  char* begin = nullptr;
  size_t bytes = 0;
  bool live = true;     // cleared by weftCommDeregister (the entry keeps its index)
  bool usable = false;  // every rank's buffer of this registration is mapped by all its peers
  uint64_t allocation_id = 0;       // the weftMemAlloc allocation it lies in (0: none)
  RegHandle direct_handle = 0;      // this rank's registration with its direct transport
  std::vector<uint64_t> peer_keys;  // per rank: the imported RemoteKey of its buffer (0: none)
};

struct CommRegistry {
  std::vector<std::unique_ptr<CommRegistration>> entries;
  bool any_usable = false;  // identical on every rank: a usable registration was ever made
  uint64_t agreements = 0;  // zero-copy agreements run (identical on every rank)
  std::vector<PeerUserBuffers> peer_buffers;  // the current zero-copy call's, per rank
};

// weftCommRegister / weftCommDeregister (arguments checked by the caller: non-null buff, size
// > 0, handle out-pointer).
Status RegisterBuffer(weftComm* comm, void* buff, size_t size, void** handle);
Status DeregisterBuffer(weftComm* comm, void* handle);

// The buffers of one call, as the zero-copy agreement sees them.
struct ZeroCopyCall {
  Collective collective = Collective::kAllReduce;
  const void* input = nullptr;
  size_t input_bytes = 0;
  const void* output = nullptr;
  size_t output_bytes = 0;
  // Input and output do not overlap: an all-to-all reads peers' buffers in place only when
  // they are disjoint on every rank (ScheduleRequest::out_of_place).
  bool disjoint = false;
};
// Whether the call is worth an agreement; decided from what every rank knows alike.
bool ZeroCopyCandidate(const weftComm* comm, const ZeroCopyCall& call);
// Publishes this rank's record, runs `signal_round` (one signal to and from every peer), and
// returns whether every rank's buffers are registered and usable; then comm's registry holds
// the peers' mapped buffers for the executor.
StatusOr<bool> AgreeZeroCopy(weftComm* comm, const ZeroCopyCall& call,
                             const std::function<Status()>& signal_round);

}  // namespace weft
