// weft.hpp — a thin C++ wrapper over weft.h.
//
// Error style: every failing call throws weft::Error (a std::runtime_error) carrying the
// weftResult_t and weftGetLastError()'s message. Communicator is move-only and destroys its
// handle when it goes out of scope (weftCommDestroy; call abort() to tear down without
// waiting for peers).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "weft/weft.h"

namespace weft {

class Error : public std::runtime_error {
 public:
  Error(weftResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  weftResult_t code() const { return code_; }

 private:
  weftResult_t code_;
};

inline void Check(weftResult_t r, const char* call) {
  if (r != weftSuccess)
    throw Error(r, std::string(call) + ": " + weftGetErrorString(r) + ": " +
                       weftGetLastError(nullptr));
}

class Communicator {
 public:
  // From the launcher's environment (weftrun, torchrun, srun, mpirun).
  static Communicator FromEnv() {
    weftComm_t c = nullptr;
    weftResult_t r = weftCommInitFromEnv(&c);
    if (r != weftSuccess) {
      weftCommDestroy(c);
      Check(r, "weftCommInitFromEnv");
    }
    return Communicator(c);
  }
  static Communicator FromUniqueId(int nranks, const weftUniqueId& id, int rank) {
    weftComm_t c = nullptr;
    weftResult_t r = weftCommInitRank(&c, nranks, id, rank);
    if (r != weftSuccess) {
      weftCommDestroy(c);
      Check(r, "weftCommInitRank");
    }
    return Communicator(c);
  }
  explicit Communicator(weftComm_t handle) : comm_(handle) {}
  Communicator(Communicator&& o) noexcept : comm_(std::exchange(o.comm_, nullptr)) {}
  Communicator& operator=(Communicator&& o) noexcept {
    if (this != &o) {
      reset();
      comm_ = std::exchange(o.comm_, nullptr);
    }
    return *this;
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() { reset(); }

  weftComm_t get() const { return comm_; }
  int rank() const {
    int r = 0;
    Check(weftCommUserRank(comm_, &r), "weftCommUserRank");
    return r;
  }
  int size() const {
    int n = 0;
    Check(weftCommCount(comm_, &n), "weftCommCount");
    return n;
  }
  void allReduce(const void* send, void* recv, size_t count, weftDataType_t t, weftRedOp_t op,
                 weftStream_t s = nullptr) {
    Check(weftAllReduce(send, recv, count, t, op, comm_, s), "weftAllReduce");
  }
  void allGather(const void* send, void* recv, size_t sendcount, weftDataType_t t,
                 weftStream_t s = nullptr) {
    Check(weftAllGather(send, recv, sendcount, t, comm_, s), "weftAllGather");
  }
  void reduceScatter(const void* send, void* recv, size_t recvcount, weftDataType_t t,
                     weftRedOp_t op, weftStream_t s = nullptr) {
    Check(weftReduceScatter(send, recv, recvcount, t, op, comm_, s), "weftReduceScatter");
  }
  void broadcast(const void* send, void* recv, size_t count, weftDataType_t t, int root,
                 weftStream_t s = nullptr) {
    Check(weftBroadcast(send, recv, count, t, root, comm_, s), "weftBroadcast");
  }
  void reduce(const void* send, void* recv, size_t count, weftDataType_t t, weftRedOp_t op,
              int root, weftStream_t s = nullptr) {
    Check(weftReduce(send, recv, count, t, op, root, comm_, s), "weftReduce");
  }
  void allToAll(const void* send, void* recv, size_t count, weftDataType_t t,
                weftStream_t s = nullptr) {
    Check(weftAllToAll(send, recv, count, t, comm_, s), "weftAllToAll");
  }
  void send(const void* buf, size_t count, weftDataType_t t, int peer, weftStream_t s = nullptr) {
    Check(weftSend(buf, count, t, peer, comm_, s), "weftSend");
  }
  void recv(void* buf, size_t count, weftDataType_t t, int peer, weftStream_t s = nullptr) {
    Check(weftRecv(buf, count, t, peer, comm_, s), "weftRecv");
  }
  void barrier(weftStream_t s = nullptr) { Check(weftBarrier(comm_, s), "weftBarrier"); }
  Communicator split(int color, int key) {
    weftComm_t c = nullptr;
    Check(weftCommSplit(comm_, color, key, &c), "weftCommSplit");
    return Communicator(c);
  }
  void abort() {
    if (comm_) weftCommAbort(std::exchange(comm_, nullptr));
  }

 private:
  void reset() {
    if (comm_) weftCommDestroy(std::exchange(comm_, nullptr));
  }
  weftComm_t comm_ = nullptr;
};

}  // namespace weft
