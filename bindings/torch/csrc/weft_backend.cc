// WeftBackend: communicator creation from torch's store, the submission path (inline or the
// progress thread), coalescing, timeouts, split and teardown. The collectives themselves are
// translated in collectives.cc.
#include "weft_backend.h"

#include <algorithm>
#include <cstring>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include "tensor_args.h"

namespace weft_torch {
namespace {

double Seconds(std::chrono::milliseconds timeout) { return timeout.count() / 1000.0; }

// Backend::Options::clone() where torch has it (newer torch: keeps subclasses whole), else a
// copy (torch 2.11, the lent GPU machine's, has no clone()).
template <typename O>
auto CloneOptions(const O& options, int) -> decltype(options.clone()) {
  return options.clone();
}
template <typename O>
c10::intrusive_ptr<O> CloneOptions(const O& options, long) {
  return c10::make_intrusive<O>(options);
}

// Rank 0 creates the id (weft's root listener opens on this process) and publishes its bytes,
// the 128-bit secret included, under the group's store prefix; the others read them. A
// generation counter gives each incarnation of a group fresh keys: a group re-created after
// destroy_process_group reuses its store prefix, and a FileStore keeps old keys.
weftUniqueId ExchangeUniqueId(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                              int size) {
  const int64_t ticket = store->add("weft/ticket", 1);  // 1..size for the first incarnation
  const std::string key = "weft/unique_id/" + std::to_string((ticket - 1) / size);
  weftUniqueId id;
  if (rank == 0) {
    CheckWeft(weftGetUniqueId(&id), "weftGetUniqueId");
    const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal);
    store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store->get(key);  // waits up to the store's timeout
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "weft: the store holds a unique id of ",
                bytes.size(), " bytes under ", key, ", expected ", sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  return id;
}

}  // namespace

WeftBackend::WeftBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size) {
  TORCH_CHECK_VALUE(size >= 1, "weft: world size ", size, " must be at least 1");
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, "weft: rank ", rank, " is outside [0, ", size, ")");
  weftUniqueId id = ExchangeUniqueId(store, rank, size);
  weftComm_t comm = nullptr;
  weftResult_t result = weftCommInitRank(&comm, size, id, rank);
  std::memset(id.internal, 0, sizeof(id.internal));  // the secret lives on in weft only
  CheckWeft(result, "weftCommInitRank");
  comm_ = comm;
  setTimeout(timeout);
}

WeftBackend::WeftBackend(weftComm_t comm, int rank, int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), comm_(comm) {
  setTimeout(timeout);
}

WeftBackend::~WeftBackend() {
  try {
    shutdown();
  } catch (...) {
    // A destructor must not throw; shutdown already aborted what it could not destroy.
  }
}

weftComm_t WeftBackend::Comm() const {
  weftComm_t comm = comm_.load();
  if (comm == nullptr)
    C10_THROW_ERROR(DistBackendError, "weft: the process group was shut down or aborted");
  return comm;
}

void WeftBackend::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(timeout.count() >= 0, "weft: timeout ", timeout.count(),
                    " ms must not be negative");
  timeout_seconds_ = Seconds(timeout);
  options_->timeout = timeout;
  weftComm_t comm = comm_.load();
  // Applied now when idle; otherwise the next operation applies it (ApplyTimeout).
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (comm != nullptr && !busy_ && queue_.empty()) {
    CheckWeft(weftCommSetTimeout(comm, timeout_seconds_), "weftCommSetTimeout");
    applied_seconds_ = timeout_seconds_;
  }
}

void WeftBackend::ApplyTimeout(std::chrono::milliseconds timeout) {
  const double wanted = timeout.count() >= 0 ? Seconds(timeout) : timeout_seconds_.load();
  if (wanted == applied_seconds_) return;
  CheckWeft(weftCommSetTimeout(Comm(), wanted), "weftCommSetTimeout");
  applied_seconds_ = wanted;
}

c10::intrusive_ptr<WeftWork> WeftBackend::NewWork(c10d::OpType type,
                                                  std::vector<at::Tensor> outputs,
                                                  const c10::optional<at::Device>& device) {
  if (!device)
    return c10::make_intrusive<WeftWork>(getRank(), type, std::move(outputs), ++sequence_);
  // The Work may outlive the backend (a Future kept by DDP): it checks errors through a weak
  // reference. A backend is always owned by an intrusive_ptr (pybind11 or split/shrink).
  c10::weak_intrusive_ptr<WeftBackend> weak(
      c10::intrusive_ptr<WeftBackend>::unsafe_reclaim_from_nonowning(this));
  auto check = [weak] {
    if (c10::intrusive_ptr<WeftBackend> backend = weak.lock()) backend->CheckAsyncError();
  };
  return c10::make_intrusive<WeftWork>(getRank(), type, std::move(outputs), ++sequence_,
                                       std::vector<c10::Device>{*device}, check);
}

PendingOp WeftBackend::NewOp(const CallDevice& dev, c10d::OpType type,
                             std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout) {
  PendingOp op;
  const c10::optional<at::Device> device = dev.CudaDevice();
  op.work = NewWork(type, std::move(outputs), device);
  op.timeout = timeout;
  // Generic c10 interface (no c10/cuda): the device's current stream on this thread.
  if (device) op.stream = c10::impl::VirtualGuardImpl(device->type()).getStream(*device);
  return op;
}

void WeftBackend::CheckAsyncError() {
  weftComm_t comm = comm_.load();
  if (comm == nullptr) return;
  weftResult_t async = weftSuccess;
  CheckWeft(weftCommGetAsyncError(comm, &async), "weftCommGetAsyncError");
  if (async == weftSuccess) return;
  failed_ = true;
  C10_THROW_ERROR(DistBackendError, std::string("weft: an operation of this group failed after "
                                                "it was queued on a CUDA stream (") +
                                        weftGetErrorString(async) + "): " +
                                        weftGetLastError(nullptr) +
                                        "; the communicator refuses further work");
}

// ---- submission ----

c10::intrusive_ptr<c10d::Work> WeftBackend::Submit(PendingOp op, bool async_op) {
  c10::intrusive_ptr<WeftWork> work = op.work;
  FlushPointToPoint();  // sends and receives posted earlier reach weft first
  if (coalescing_) {
    CheckGroupable(coalesced_, op, "a coalesced block");
    coalesced_.push_back(std::move(op));
    return work;
  }
  Batch batch;
  const bool stream_ordered = op.StreamOrdered();
  batch.ops.push_back(std::move(op));
  if (stream_ordered) {  // async_op or not: queued on the stream, returns at once
    RunDeviceBatch(batch);
    return work;
  }
  bool run_inline = false;
  if (!async_op) {
    std::lock_guard<std::mutex> lock(queue_mu_);
    // Inline only when nothing is queued: operations must reach weft in submission order.
    if (queue_.empty() && !busy_) run_inline = busy_ = true;
  }
  if (!run_inline) {
    Enqueue(std::move(batch));
    return work;
  }
  std::exception_ptr error = RunBatch(batch);
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    busy_ = false;
  }
  queue_cv_.notify_all();
  CompleteBatch(batch, error);
  return work;
}

void WeftBackend::RunDeviceBatch(Batch& batch) {
  {
    std::unique_lock<std::mutex> lock(queue_mu_);
    // On the progress thread itself (a Future callback that submits) nothing else runs.
    if (!(progress_.joinable() && progress_.get_id() == std::this_thread::get_id()))
      queue_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    busy_ = true;
  }
  std::exception_ptr error = RunBatch(batch);
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    busy_ = false;
  }
  queue_cv_.notify_all();
  CompleteBatch(batch, error);
}

void WeftBackend::CheckGroupable(const std::vector<PendingOp>& others, const PendingOp& op,
                                 const char* what) {
  if (others.empty()) return;
  const PendingOp& first = others.front();
  TORCH_CHECK_VALUE(first.stream.has_value() == op.stream.has_value(), "weft: ", what,
                    " mixes CPU and CUDA tensors (operation ", others.size() + 1, " is on ",
                    op.stream ? "CUDA" : "the CPU", ", the first on ",
                    first.stream ? "CUDA" : "the CPU", "); use one kind per block");
  TORCH_CHECK_VALUE(!op.stream || *op.stream == *first.stream, "weft: ", what,
                    " mixes CUDA streams (operation ", others.size() + 1, " on ", *op.stream,
                    ", the first on ", *first.stream, "); keep one current stream per block");
}

void WeftBackend::Enqueue(Batch batch) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    TORCH_CHECK(!stop_, "weft: the process group was shut down");
    queue_.push_back(std::move(batch));
    if (!progress_.joinable()) progress_ = std::thread([this] { ProgressLoop(); });
  }
  queue_cv_.notify_all();
}

c10::intrusive_ptr<c10d::Work> WeftBackend::SubmitPointToPoint(PendingOp op) {
  c10::intrusive_ptr<WeftWork> work = op.work;
  if (coalescing_) {
    CheckGroupable(coalesced_, op, "a coalesced block");
    coalesced_.push_back(std::move(op));
    return work;
  }
  // One weft group holds host or CUDA operations of one stream: a send or receive of another
  // kind posts the ones held so far first.
  bool groupable = true;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    groupable = p2p_held_.empty() || p2p_held_.front().stream == op.stream;
  }
  if (!groupable) FlushPointToPoint();
  // The hook runs on whichever thread first waits on (or polls) the Work. The backend outlives
  // it: shutdown and abort flush, which clears every held-back Work's hook.
  work->SetBeforeWait([this] { FlushPointToPoint(); });
  std::lock_guard<std::mutex> lock(p2p_mu_);
  p2p_held_.push_back(std::move(op));
  return work;
}

void WeftBackend::FlushPointToPoint() {
  Batch batch;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    if (p2p_held_.empty()) return;
    batch.ops = std::move(p2p_held_);
    p2p_held_.clear();
    for (PendingOp& op : batch.ops) op.work->SetBeforeWait(nullptr);
    if (!batch.ops.front().StreamOrdered()) {
      Enqueue(std::move(batch));  // under p2p_mu_: concurrent flushes keep posting order
      return;
    }
  }
  // CUDA sends and receives are queued on their stream by this thread (the one that waits on
  // them), outside p2p_mu_: RunDeviceBatch waits for the progress thread, whose Future
  // callbacks may submit (and so flush).
  RunDeviceBatch(batch);
}

void WeftBackend::IssueAll(std::vector<PendingOp>& ops) {
  if (ops.size() == 1) {
    ops[0].issue();
    return;
  }
  // Posted together, so that matched send/recv pairs (batch_isend_irecv) cannot deadlock.
  CheckWeft(weftGroupStart(), "weftGroupStart");
  try {
    for (PendingOp& op : ops) op.issue();
  } catch (...) {
    (void)weftGroupEnd();  // leave this thread's group depth balanced
    throw;
  }
  CheckWeft(weftGroupEnd(), "weftGroupEnd (coalesced operations)");
}

std::exception_ptr WeftBackend::RunBatch(Batch& batch) {
  try {
    // CUDA operations: their stream is current while they issue and copy back (torch's own
    // kernels in issue/finish, staging copies, run on it).
    const c10::OptionalStreamGuard stream_guard(batch.ops.front().stream);
    ApplyTimeout(batch.ops.front().timeout);
    IssueAll(batch.ops);
    for (PendingOp& op : batch.ops)
      if (op.finish) op.finish();
    return nullptr;
  } catch (const c10::ValueError&) {
    return std::current_exception();  // weft refused an argument: the communicator is intact
  } catch (...) {
    failed_ = true;  // weft refuses further work after a remote error or timeout
    return std::current_exception();
  }
}

void WeftBackend::CompleteBatch(Batch& batch, const std::exception_ptr& error) {
  // CUDA work: the end event follows everything the batch queued on its stream.
  if (!error && batch.ops.front().stream) {
    const c10::Stream& stream = *batch.ops.front().stream;
    for (PendingOp& op : batch.ops) op.work->RecordEnd(stream);
    if (batch.group_work) batch.group_work->RecordEnd(stream);
  }
  for (PendingOp& op : batch.ops) op.work->Complete(error);
  if (batch.group_work) batch.group_work->Complete(error);
}

void WeftBackend::ProgressLoop() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;  // stop requested and drained
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error = RunBatch(batch);
    lock.lock();
    busy_ = false;
    lock.unlock();
    queue_cv_.notify_all();
    CompleteBatch(batch, error);  // Future callbacks (DDP hooks) run on this thread
    // Drop the batch's tensors before taking the lock again: the last reference to a tensor
    // that Python owns takes the GIL, and a thread holding the GIL may be waiting for
    // queue_mu_ in Enqueue (found as a deadlock with the compression hooks).
    batch = Batch();
    lock.lock();
  }
}

// ---- coalescing ----

void WeftBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "weft: startCoalescing called twice without endCoalescing");
  FlushPointToPoint();  // held-back sends and receives precede the block
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> WeftBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "weft: endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<at::Tensor> outputs;
  for (PendingOp& op : coalesced_)
    for (at::Tensor& t : op.work->result()) outputs.push_back(t);
  c10::optional<at::Device> device;
  if (!coalesced_.empty() && coalesced_.front().stream)
    device = coalesced_.front().stream->device();
  Batch batch;
  batch.group_work = NewWork(c10d::OpType::COALESCED, std::move(outputs), device);
  batch.ops = std::move(coalesced_);
  coalesced_.clear();
  c10::intrusive_ptr<WeftWork> work = batch.group_work;
  if (batch.ops.empty())
    work->Complete(nullptr);
  else if (batch.ops.front().StreamOrdered())
    RunDeviceBatch(batch);
  else
    Enqueue(std::move(batch));
  return work;
}

c10::intrusive_ptr<c10d::Work> WeftBackend::Coalesce(
    bool async_op, const std::function<c10::intrusive_ptr<c10d::Work>()>& add_ops) {
  if (coalescing_) return add_ops();
  startCoalescing();
  try {
    add_ops();
  } catch (...) {
    coalescing_ = false;  // nothing was queued yet: drop the half-built group
    coalesced_.clear();
    throw;
  }
  c10::intrusive_ptr<c10d::Work> work = endCoalescing();
  if (!async_op) work->wait();
  return work;
}

// ---- split ----

c10::intrusive_ptr<c10d::Backend> WeftBackend::split(
    const c10::intrusive_ptr<c10d::Store>& /*store*/, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  // ranks lists the parent ranks of the new group in new-rank order. Disjoint groups have
  // distinct smallest members, which makes a color every member computes alike.
  auto me = std::find(ranks.begin(), ranks.end(), getRank());
  if (me == ranks.end()) {
    splitNoColor();
    return nullptr;
  }
  const int color = *std::min_element(ranks.begin(), ranks.end());
  const int key = static_cast<int>(me - ranks.begin());
  weftComm_t child = nullptr;
  PendingOp op;
  op.work = NewWork(c10d::OpType::UNKNOWN, {});
  op.timeout = std::chrono::milliseconds(-1);
  op.issue = [this, color, key, &child] {
    CheckWeft(weftCommSplit(Comm(), color, key, &child), "weftCommSplit");
  };
  Submit(std::move(op), /*async_op=*/false)->wait();
  ++split_count_;
  std::chrono::milliseconds timeout =
      opts ? opts->timeout : std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds_ * 1000));
  int child_rank = 0, child_size = 0;
  CheckWeft(weftCommUserRank(child, &child_rank), "weftCommUserRank");
  CheckWeft(weftCommCount(child, &child_size), "weftCommCount");
  auto backend = c10::make_intrusive<WeftBackend>(child, child_rank, child_size, timeout);
  if (opts) {
    backend->options_ = CloneOptions(*opts, 0);
    backend->options_->timeout = timeout;
  }
  return backend;
}

c10::intrusive_ptr<c10d::Backend> WeftBackend::shrink(const std::vector<int64_t>& ranks_to_exclude,
                                                     int shrink_flags,
                                                     const c10::intrusive_ptr<Options>& opts_override) {
  TORCH_CHECK_VALUE(shrink_flags == WEFT_SHRINK_DEFAULT || shrink_flags == WEFT_SHRINK_ABORT,
                    "weft shrink: shrink_flags=", shrink_flags,
                    " is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)");
  std::vector<int> exclude;
  for (int64_t r : ranks_to_exclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < getSize(), "weft shrink: ranks_to_exclude holds ", r,
                      ", outside [0, ", getSize(), ")");
    exclude.push_back(static_cast<int>(r));
  }
  // Called on this thread, not through the progress thread: after a peer died, the operation
  // that failed may be what that thread last ran, and weftCommShrink (with SHRINK_ABORT:
  // after revoking what is in flight) takes the communicator itself.
  weftComm_t child = nullptr;
  CheckWeft(weftCommShrink(Comm(), exclude.data(), static_cast<int>(exclude.size()), &child,
                           shrink_flags),
            "weftCommShrink");
  int child_rank = 0, child_size = 0;
  CheckWeft(weftCommUserRank(child, &child_rank), "weftCommUserRank");
  CheckWeft(weftCommCount(child, &child_size), "weftCommCount");
  std::chrono::milliseconds timeout = opts_override
                                          ? opts_override->timeout
                                          : std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds_ * 1000));
  auto backend = c10::make_intrusive<WeftBackend>(child, child_rank, child_size, timeout);
  backend->options_ = CloneOptions(*(opts_override ? opts_override : options_), 0);
  backend->options_->timeout = timeout;
  return backend;
}

void WeftBackend::splitNoColor() {
  PendingOp op;
  op.work = NewWork(c10d::OpType::UNKNOWN, {});
  op.timeout = std::chrono::milliseconds(-1);
  op.issue = [this] {
    weftComm_t none = nullptr;
    CheckWeft(weftCommSplit(Comm(), WEFT_SPLIT_NOCOLOR, 0, &none), "weftCommSplit (no color)");
  };
  Submit(std::move(op), /*async_op=*/false)->wait();
  ++split_count_;
}

std::string WeftBackend::lastAlgorithm() {
  const char* name = "";
  CheckWeft(weftCommGetLastAlgorithm(Comm(), &name), "weftCommGetLastAlgorithm");
  return name;
}

// ---- teardown ----

void WeftBackend::StopProgressThread() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  if (progress_.joinable() && progress_.get_id() != std::this_thread::get_id()) progress_.join();
}

void WeftBackend::shutdown() {
  FlushPointToPoint();   // a send or receive nobody waited on still runs
  StopProgressThread();  // drains what was queued
  weftComm_t comm = comm_.exchange(nullptr);
  if (comm == nullptr) return;
  // After a remote error or timeout weft refuses work: abort instead of a graceful destroy.
  (void)(failed_ ? weftCommAbort(comm) : weftCommDestroy(comm));
}

void WeftBackend::abort() {
  // weftCommAbort may run while the progress thread is inside a collective: weft aborts the
  // transports, the collective returns an error, and later queued operations fail fast.
  weftComm_t comm = comm_.exchange(nullptr);
  if (comm != nullptr) (void)weftCommAbort(comm);
  FlushPointToPoint();  // held-back sends and receives fail (no communicator) and complete
  StopProgressThread();
}

}  // namespace weft_torch
