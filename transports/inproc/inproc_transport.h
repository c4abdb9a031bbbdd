// InprocTransport: ranks that are threads of one process (weftCommInitAll, tests).
//
// All ranks of a group share one InprocHub. A send and the matching recv meet in the hub's
// per-(src, dst, channel) queues; whichever is posted second copies the bytes and completes
// both requests (rendezvous, one copy). A waiting rank sleeps on its own condition variable
// until a peer completes one of its requests, so threads never spin on oversubscribed cores.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "transports/transport.h"

namespace weft {

class InprocHub {
 public:
  explicit InprocHub(int nranks);
  int nranks() const { return nranks_; }

 private:
  friend class InprocTransport;
  struct Pending {
    uint64_t tag;
    void* buf;  // send: const source; recv: destination
    size_t bytes;
    TransportRequest* req;
    bool up_to = false;  // recv: `bytes` is a maximum
  };
  struct Queue {
    std::deque<Pending> sends, recvs;
  };
  struct RankWake {
    std::condition_variable cv;
    uint64_t epoch = 0;  // bumped when a peer completes one of this rank's requests
  };
  Queue& QueueFor(int src, int dst, int channel);  // requires mu_

  int nranks_;
  std::mutex mu_;
  std::map<std::tuple<int, int, int>, Queue> queues_;
  std::vector<RankWake> wake_;
  std::vector<int> pending_;  // per rank: posted, not yet completed requests
  std::vector<bool> aborted_;
};

// The channels a post may use: the range tcp carries (its wire has 2^16, the top one its own).
inline constexpr int kMaxInprocChannel = (1 << 16) - 2;

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  ~InprocTransport() override;
  const char* name() const override { return "inproc"; }
  using Transport::PostRecv;
  using Transport::PostRecvUpTo;
  using Transport::PostSend;
  Status PostSend(int peer, int channel, uint64_t tag, const MemRef& src,
                  TransportRequest* req) override;
  Status PostRecv(int peer, int channel, uint64_t tag, const MemRef& dst,
                  TransportRequest* req) override;
  Status PostRecvUpTo(int peer, int channel, uint64_t tag, const MemRef& dst,
                      TransportRequest* req) override;
  Status Progress(int timeout_us) override;
  bool HasPending() const override;
  void Abort(const Status& why) override;

 private:
  // up_to: a recv that accepts any size up to `bytes`.
  Status Post(bool is_send, int peer, int channel, uint64_t tag, const MemRef& mem,
              bool up_to, TransportRequest* req);
  std::shared_ptr<InprocHub> hub_;
  int rank_;
  uint64_t seen_epoch_ = 0;
};

}  // namespace weft
