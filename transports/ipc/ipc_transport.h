// IpcTransport: device memory of the ranks of one host, reached device to device through the
// device runtime's IPC handles (CUDA IPC; the emulated GPU's memfd handles), with one-sided
// operations ordered on a stream (issue 36).
//
// Unlike the host transports (transport.h), nothing here is progressed by a host thread: every
// operation is enqueued on the caller's device stream and runs when the stream reaches it, in
// order with the caller's other work there. That is what lets a direct schedule (oneshot,
// twoshot, the direct allgather / reduce-scatter / all-to-all) run device to device: its steps
// become copies, reduction kernels and flag operations on the stream (exec/stream_program.h).
//
// Windows. Each rank allocates one window on its device: a header of signal slots and
// `window_bytes` of data (ipc_wire.h), exports it, and allgathers a record (handle, pid,
// device) with its peers once, at setup; each rank imports every peer's window once and keeps
// it until the transport is destroyed (cached: windows never move). The data part is the
// Scratch buffer of direct schedules; peers read it (Get) or write it (Put).
//
// Signals. A signal to peer q writes the next value of a counter into q's slot for this rank
// (WriteFlag on q's window: a stream memory operation, after every earlier operation of the
// stream, so the data before it is visible first); a wait on q stalls the stream until this
// rank's slot for q reaches the next expected value (WaitFlag, compared cyclically). Counters
// only grow, so signals are counted and never lost, as the schedules' rule (schedule.h) needs.
// The counters advance on the host when the operations are enqueued: every rank enqueues the
// same schedules in the same order, so sender and receiver agree on each value.
//
// Failure. A peer that dies leaves this rank's stream waiting on a slot nobody will write.
// CheckPeers (called by the communicator's watchdog while a call is in flight) finds a dead
// peer process; ReleaseWaits then writes every slot past any value a queued wait expects, on a
// stream of its own, so the caller's stream drains (its results are then undefined: the call
// reports the failure through weftCommGetAsyncError). The transport is unusable afterwards.
//
// Threading: one thread at a time enqueues (the communicator's caller); CheckPeers and
// ReleaseWaits come from the watchdog thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "device/device_runtime.h"
#include "transports/ipc/ipc_options.h"
#include "transports/ipc/ipc_wire.h"

namespace weft::ipc {

// Allgathers `bytes` from every rank: rank r's `mine` lands at all + r * bytes (the
// communicator passes its data-path allgather; tests a fake).
using AllGatherFn = std::function<Status(const void* mine, size_t bytes, void* all)>;

class IpcTransport {
 public:
  // Collective over all nranks ranks: allocates this rank's window on `device`, exchanges
  // records and imports the windows of `host_ranks` (the ranks of this rank's host, itself
  // included: the only ones its direct steps reach). Fails, on every rank, when a peer's
  // record disagrees (runtime, window size) or an import fails.
  static StatusOr<std::unique_ptr<IpcTransport>> Create(device::DeviceRuntime& rt, int rank,
                                                         int nranks, int device,
                                                         const std::vector<int>& host_ranks,
                                                         const IpcOptions& options,
                                                         const AllGatherFn& allgather);
  ~IpcTransport();
  IpcTransport(const IpcTransport&) = delete;
  IpcTransport& operator=(const IpcTransport&) = delete;

  const char* name() const { return "ipc"; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  size_t window_bytes() const { return window_bytes_; }
  // This rank's window data, and peer q's as mapped here (device pointers).
  char* LocalWindow() const { return data_[rank_]; }
  char* PeerWindow(int peer) const { return data_[peer]; }
  // Whether peer's window is mapped here (a rank of this host).
  bool Reaches(int peer) const { return peer >= 0 && peer < nranks_ && peer != rank_ && base_[peer] != nullptr; }
  // One line per peer for WEFT_DEBUG=INFO: "rank 1 via ipc (device 1, pid 4242)", then the
  // copy policy ("copies: SM kernel below 2100000 bytes, copy engine from there").
  std::string Describe() const;
  // How many copies went each way so far (tests; the stream runs them later).
  size_t copies(CopyPath path) const {
    return (path == CopyPath::kSmKernel ? sm_copies_ : ce_copies_).load(std::memory_order_relaxed);
  }

  // ---- stream-ordered one-sided operations ----
  // Copies `bytes` of device memory (this rank's, or a peer's window as mapped here) from src
  // to dst, by the copy engine or an SM kernel as WEFT_IPC_COPY and the model of
  // ipc_options.h decide for the size; WEFT_DEBUG=INFO names each path's first copy. Put, Get
  // and the direct schedules' copies and reads (exec/stream_program.h) all go through it.
  Status Copy(void* dst, const void* src, size_t bytes, device::StreamHandle s);
  // Copies `bytes` from src (device memory) into peer's window at `offset`.
  Status Put(int peer, size_t offset, const void* src, size_t bytes, device::StreamHandle s);
  // Copies `bytes` from peer's window at `offset` into dst (device memory).
  Status Get(int peer, size_t offset, void* dst, size_t bytes, device::StreamHandle s);
  // The next signal to peer (release: the stream's earlier writes are visible to the peer first).
  Status Signal(int peer, device::StreamHandle s);
  // Stalls the stream until the next signal from peer has arrived (acquire).
  Status Wait(int peer, device::StreamHandle s);

  // ---- failure ----
  // A peer whose process is gone (or a zombie): its rank and a message, else -1.
  int CheckPeers(std::string* why) const;
  // Lets every wait enqueued so far pass (see above). Idempotent.
  Status ReleaseWaits();
  bool failed() const { return failed_.load(std::memory_order_acquire); }

 private:
  IpcTransport(device::DeviceRuntime& rt, int rank, int nranks, int device, size_t window_bytes,
               CopyPath copy);
  Status Exchange(const AllGatherFn& allgather, const std::vector<int>& host_ranks);
  Status CheckPeerArgs(const char* what, int peer) const;

  device::DeviceRuntime& rt_;
  const int rank_, nranks_, device_;
  const size_t window_bytes_;
  const size_t header_bytes_;
  char* local_ = nullptr;             // this rank's allocation (header + data)
  std::vector<char*> base_;           // per rank: its allocation as mapped here
  std::vector<char*> data_;           // per rank: base + header
  std::vector<int> pid_;
  std::vector<int> peer_device_;
  // Per peer: the last value written into its slot, and the last value waited for in ours.
  // Atomic because ReleaseWaits reads them from the watchdog thread.
  std::unique_ptr<std::atomic<uint32_t>[]> sent_, expected_;
  device::StreamHandle rescue_ = nullptr;  // ReleaseWaits' own stream
  const CopyPath copy_;                    // WEFT_IPC_COPY
  std::atomic<size_t> sm_copies_{0}, ce_copies_{0};
  std::atomic<bool> failed_{false};
};

}  // namespace weft::ipc
