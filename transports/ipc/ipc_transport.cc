#include "transports/ipc/ipc_transport.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/log.h"

namespace weft::ipc {
namespace {

// How far ReleaseWaits moves a slot past the last expected value: more than any number of
// signals enqueued between its snapshot and the communicator noticing the failure, less than
// the half of the counter space the cyclic comparison allows.
constexpr uint32_t kReleaseMargin = uint32_t{1} << 28;

// A process that exited but was not reaped yet still answers kill(pid, 0): read its state.
bool ProcessGone(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;  // no procfs: kill's answer stands
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

IpcTransport::IpcTransport(device::DeviceRuntime& rt, int rank, int nranks, int device,
                           size_t window_bytes, CopyPath copy)
    : rt_(rt), rank_(rank), nranks_(nranks), device_(device), window_bytes_(window_bytes),
      header_bytes_(HeaderBytes(nranks)), base_(nranks, nullptr), data_(nranks, nullptr),
      pid_(nranks, 0), peer_device_(nranks, -1),
      sent_(new std::atomic<uint32_t>[nranks]), expected_(new std::atomic<uint32_t>[nranks]),
      copy_(copy) {
  for (int q = 0; q < nranks; ++q) {
    sent_[q].store(0, std::memory_order_relaxed);
    expected_[q].store(0, std::memory_order_relaxed);
  }
}

StatusOr<std::unique_ptr<IpcTransport>> IpcTransport::Create(device::DeviceRuntime& rt, int rank,
                                                             int nranks, int device,
                                                             const std::vector<int>& host_ranks,
                                                             const IpcOptions& options,
                                                             const AllGatherFn& allgather) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return InvalidArgument("ipc: rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  if (device < 0 || device >= rt.DeviceCount())
    return InvalidArgument("ipc: device=" + std::to_string(device) + " is not in [0, " +
                           std::to_string(rt.DeviceCount()) + ")");
  std::unique_ptr<IpcTransport> t(
      new IpcTransport(rt, rank, nranks, device, options.window_bytes, options.copy));
  void* mem = nullptr;
  WEFT_RETURN_IF_ERROR(rt.Malloc(&mem, t->header_bytes_ + t->window_bytes_, device)
                           .WithContext("ipc: window of " + std::to_string(t->window_bytes_) + " bytes"));
  t->local_ = static_cast<char*>(mem);
  t->base_[rank] = t->local_;
  t->data_[rank] = t->local_ + t->header_bytes_;
  t->pid_[rank] = static_cast<int>(getpid());
  t->peer_device_[rank] = device;
  WEFT_RETURN_IF_ERROR(rt.StreamCreate(&t->rescue_, device));
  // The slots start at 0 (a reused allocation may hold anything): zeroed on the device, and
  // finished before any peer can signal (the exchange below is what lets them start).
  const std::vector<char> zeros(t->header_bytes_, 0);
  WEFT_RETURN_IF_ERROR(rt.MemcpyAsync(t->local_, zeros.data(), zeros.size(), t->rescue_));
  WEFT_RETURN_IF_ERROR(rt.StreamSynchronize(t->rescue_));
  WEFT_RETURN_IF_ERROR(t->Exchange(allgather, host_ranks));
  return t;
}

Status IpcTransport::Exchange(const AllGatherFn& allgather, const std::vector<int>& host_ranks) {
  PeerRecord mine;
  std::snprintf(mine.runtime, sizeof mine.runtime, "%s", rt_.name());
  mine.rank = rank_;
  mine.pid = pid_[rank_];
  mine.device = device_;
  mine.window_bytes = window_bytes_;
  WEFT_RETURN_IF_ERROR(rt_.ExportHandle(local_, &mine.handle).WithContext("ipc: export of the window"));
  std::vector<PeerRecord> all(static_cast<size_t>(nranks_));
  WEFT_RETURN_IF_ERROR(allgather(&mine, sizeof mine, all.data()).WithContext("ipc: record exchange"));
  // Check every record before importing any, so that every rank fails alike on a mismatch.
  for (int q = 0; q < nranks_; ++q)
    if (q != rank_) WEFT_RETURN_IF_ERROR(CheckPeerRecord(mine, all[q], q));
  for (int q : host_ranks) {
    if (q == rank_ || q < 0 || q >= nranks_) continue;
    void* mapped = nullptr;
    WEFT_RETURN_IF_ERROR(rt_.ImportHandle(all[q].handle, &mapped)
                             .WithContext("ipc: import of rank " + std::to_string(q) + "'s window"));
    base_[q] = static_cast<char*>(mapped);
    data_[q] = base_[q] + header_bytes_;
    pid_[q] = all[q].pid;
    peer_device_[q] = all[q].device;
  }
  return OkStatus();
}

IpcTransport::~IpcTransport() {
  // The caller's streams have drained (the communicator waits for its calls before it
  // destroys the transport); peers may still read our window until they destroy theirs, which
  // an exported allocation survives in CUDA (freed when the last importer closes it) and in
  // the emulated GPU (the importer's mapping keeps the memory).
  if (rescue_ != nullptr) (void)rt_.StreamDestroy(rescue_);
  for (int q = 0; q < nranks_; ++q)
    if (q != rank_ && base_[q] != nullptr) (void)rt_.CloseImported(base_[q]);
  if (local_ != nullptr) (void)rt_.Free(local_);
}

std::string IpcTransport::Describe() const {
  std::string s;
  for (int q = 0; q < nranks_; ++q) {
    if (!Reaches(q)) continue;
    if (!s.empty()) s += "; ";
    s += "rank " + std::to_string(q) + " via ipc (device " + std::to_string(peer_device_[q]) +
         ", pid " + std::to_string(pid_[q]) + ")";
  }
  if (s.empty()) s = "no peers";
  if (copy_ != CopyPath::kAuto) return s + "; copies: " + CopyPathName(copy_) + " (WEFT_IPC_COPY)";
  return s + "; copies: SM kernel below " + std::to_string(CopyCrossoverBytes()) +
         " bytes, copy engine from there (the model of ipc_options.h)";
}

Status IpcTransport::Copy(void* dst, const void* src, size_t bytes, device::StreamHandle s) {
  if (bytes == 0) return OkStatus();
  const CopyPath path = ChooseCopyPath(copy_, bytes);
  std::atomic<size_t>& done = path == CopyPath::kSmKernel ? sm_copies_ : ce_copies_;
  if (done.fetch_add(1, std::memory_order_relaxed) == 0)
    WEFT_INFO("ipc: first copy by the %s (%zu bytes, WEFT_IPC_COPY=%s)", CopyPathName(path), bytes,
              copy_ == CopyPath::kAuto ? "auto" : copy_ == CopyPath::kSmKernel ? "sm" : "ce");
  if (path == CopyPath::kSmKernel) return rt_.LaunchCopy(dst, src, bytes, s);
  return rt_.MemcpyAsync(dst, src, bytes, s);
}

Status IpcTransport::CheckPeerArgs(const char* what, int peer) const {
  if (!Reaches(peer))
    return InvalidArgument(std::string("ipc ") + what + ": peer=" + std::to_string(peer) +
                           " is not another rank of this host in [0, " + std::to_string(nranks_) + ")");
  if (failed()) return RemoteError(std::string("ipc ") + what + ": the transport failed earlier");
  return OkStatus();
}

Status IpcTransport::Put(int peer, size_t offset, const void* src, size_t bytes, device::StreamHandle s) {
  WEFT_RETURN_IF_ERROR(CheckPeerArgs("put", peer));
  if (offset > window_bytes_ || bytes > window_bytes_ - offset)
    return InvalidArgument("ipc put: offset=" + std::to_string(offset) + " bytes=" +
                           std::to_string(bytes) + " exceed the window (" +
                           std::to_string(window_bytes_) + " bytes)");
  return Copy(data_[peer] + offset, src, bytes, s);
}

Status IpcTransport::Get(int peer, size_t offset, void* dst, size_t bytes, device::StreamHandle s) {
  WEFT_RETURN_IF_ERROR(CheckPeerArgs("get", peer));
  if (offset > window_bytes_ || bytes > window_bytes_ - offset)
    return InvalidArgument("ipc get: offset=" + std::to_string(offset) + " bytes=" +
                           std::to_string(bytes) + " exceed the window (" +
                           std::to_string(window_bytes_) + " bytes)");
  return Copy(dst, data_[peer] + offset, bytes, s);
}

Status IpcTransport::Signal(int peer, device::StreamHandle s) {
  WEFT_RETURN_IF_ERROR(CheckPeerArgs("signal", peer));
  const uint32_t v = sent_[peer].fetch_add(1, std::memory_order_relaxed) + 1;
  auto* slot = reinterpret_cast<uint32_t*>(base_[peer]) + rank_;
  return rt_.WriteFlag(s, slot, v);
}

Status IpcTransport::Wait(int peer, device::StreamHandle s) {
  WEFT_RETURN_IF_ERROR(CheckPeerArgs("wait", peer));
  const uint32_t v = expected_[peer].fetch_add(1, std::memory_order_relaxed) + 1;
  const auto* slot = reinterpret_cast<const uint32_t*>(local_) + peer;
  return rt_.WaitFlag(s, slot, v);
}

int IpcTransport::CheckPeers(std::string* why) const {
  for (int q = 0; q < nranks_; ++q) {
    if (!Reaches(q) || !ProcessGone(pid_[q])) continue;
    *why = "ipc: rank " + std::to_string(q) + " (pid " + std::to_string(pid_[q]) +
           ") died while rank " + std::to_string(rank_) + " waits on it";
    return q;
  }
  return -1;
}

Status IpcTransport::ReleaseWaits() {
  failed_.store(true, std::memory_order_release);
  Status first;
  for (int q = 0; q < nranks_; ++q) {
    if (!Reaches(q)) continue;
    const uint32_t past = expected_[q].load(std::memory_order_relaxed) + kReleaseMargin;
    auto* slot = reinterpret_cast<uint32_t*>(local_) + q;
    Status st = rt_.WriteFlag(rescue_, slot, past);
    if (first.ok()) first = st;
  }
  return first;
}

}  // namespace weft::ipc
