// shm_layout: the structures the shm transport places in shared memory (control segment
// header, per-pair ring counters, message and window headers). Shared by shm_transport.cc
// (the rings and windows) and shm_memory.cc (registered memory, one-sided access), and by
// nothing else: the layout is private to one build of weft (every rank of a host runs it).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace weft {
namespace shm_detail {

constexpr uint64_t kHeaderMagic = 0x7765667473686d31ULL;  // "weftshm1"
constexpr uint32_t kMsgMagic = 0x6d736731;                 // "msg1"
constexpr uint64_t kWindowMagic = 0x7765667477696e31ULL;   // "weftwin1"
constexpr size_t kLine = 64;
constexpr size_t kWindowHeaderBytes = 4096;  // keeps the window's data page-aligned
constexpr size_t kAffinityWords = 16;         // RankHeader::affinity: CPUs 0..1023

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

// Start of every control segment. Fields the owner writes once sit apart from the words that
// peers hammer (doorbell) and those the owner changes per window growth.
struct alignas(kLine) RankHeader {
  uint64_t magic;
  int32_t rank;
  int32_t pid;
  uint32_t nlocal;
  uint32_t pad0;
  uint64_t ring_bytes;
  uint64_t ring_offset;  // bytes from the segment start to ring 0's data
  alignas(kLine) std::atomic<uint32_t> doorbell;  // futex word: bumped by peers that wake us
  std::atomic<uint32_t> sleeping;                 // 1 while the owner may block on doorbell
  // The CPU the owner last ran on while waiting (sched_getcpu), -1 before: a waiting peer that
  // finds it equal to its own CPU yields instead of spinning, since spinning would keep the
  // owner, whose progress it waits for, off that CPU (shm_transport.cc, Progress).
  alignas(kLine) std::atomic<int32_t> waiting_cpu;
  // The owner's CPU affinity at creation (bit c: CPU c, the first kAffinityWords * 64 CPUs):
  // the ranks of a host are oversubscribed when the union of their masks has fewer CPUs than
  // ranks (a rank pinned to one core is not oversubscribed when its peers have other cores).
  uint64_t affinity[kAffinityWords];
  alignas(kLine) std::atomic<uint64_t> window_gen;
  std::atomic<uint64_t> window_bytes;
  std::atomic<uint32_t> closed;  // owner closed or aborted: waiting on it is pointless
  // Single-copy (CMA) probe: the owner's address of cma_probe in its own address space, and
  // the bit mask of local senders this owner can read from with process_vm_readv.
  alignas(kLine) uint64_t cma_probe;
  uint64_t cma_probe_addr;
  std::atomic<uint64_t> cma_from_mask;
  // Per-call records for peers (DirectTransport::PublishCallInfo): slot seq % 2 holds the
  // record of call `seq`, written before `seq` (release) and read after a signal (acquire).
  struct alignas(kLine) CallInfoSlot {
    std::atomic<uint64_t> seq;
    unsigned char data[48];
  };
  CallInfoSlot call_info[2];
  // The call tag (MakeCallTag) of the collective the owner runs or ran last, 0 before the
  // first (DirectTransport::PublishCurrentCall). Its own line: the owner stores it once per
  // call and peers read it only while they wait long enough to check liveness.
  alignas(kLine) std::atomic<uint64_t> current_call;
  // Blame (transport.h), read by peers only once the owner closed or while they time out:
  // the rank the owner held responsible when it aborted (+1; 0: none, the owner itself closed
  // or aborted), whether it closed because it revoked the communicator (no one failed), and
  // the culprit it announced while timing out (+1; 0: none).
  alignas(kLine) std::atomic<int32_t> failed_origin_plus1;
  std::atomic<int32_t> revoked;
  std::atomic<int32_t> culprit_plus1;
};

// Tags of tagged signals: signal number i (0-based) with a tag writes slot i % kSignalTagSlots
// as {tag, i + 1}. Only the first signal of an operation to a peer is tagged, and a sender
// cannot run kSignalTagSlots operations ahead of a receiver that must answer it, so a slot is
// read before it is reused; a reader that finds a larger index skips the check.
constexpr uint64_t kSignalTagSlots = 8;
struct SignalTagSlot {
  std::atomic<uint64_t> index;  // signal number + 1 that wrote the slot (0: never)
  std::atomic<uint64_t> tag;
};

// One per (sender -> owner) pair, in the owner's control segment. Each counter on its own
// cache line: tail and signals are written by the sender, head by the owner.
struct alignas(kLine) RingControl {
  alignas(kLine) std::atomic<uint64_t> tail;     // bytes published by the sender
  alignas(kLine) std::atomic<uint64_t> head;     // bytes consumed by the owner
  alignas(kLine) std::atomic<uint64_t> signals;  // Signal() count from the sender
  // The latest tagged signal, on the counter's own cache line: a receiver that consumes the
  // latest one checks its tag without touching signal_tags' lines (one cache-line transfer
  // less per tiny collective); older ones are checked in signal_tags as before.
  SignalTagSlot latest_tagged;
  alignas(kLine) std::atomic<uint64_t> cma_acks;  // single-copy messages the owner has read
  alignas(kLine) SignalTagSlot signal_tags[kSignalTagSlots];  // written by the sender
};

constexpr uint16_t kMsgSingleCopy = 1;  // payload not in the ring: read it at `address`

struct alignas(kLine) MsgHeader {
  uint32_t magic;
  uint16_t channel;
  uint16_t flags;
  uint64_t tag;
  uint64_t bytes;
  uint64_t address;  // kMsgSingleCopy: the payload in the sender's address space
  unsigned char pad1[kLine - 32];
};
static_assert(sizeof(MsgHeader) == kLine, "message header is one cache line");

struct alignas(kLine) WindowHeader {
  uint64_t magic;
  int32_t owner;
  uint32_t pad0;
  uint64_t gen;
  uint64_t bytes;
  std::atomic<uint32_t> mapped_by;  // peers that mapped it; the last one unlinks the name
};

}  // namespace shm_detail

}  // namespace weft
