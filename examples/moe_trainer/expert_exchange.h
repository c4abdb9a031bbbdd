// expert_exchange.h: how the MoE layer moves token rows to the ranks that hold their experts
// and back. The layer only sees this interface; parallel.cc implements it with weftAllToAllv
// over the EP communicator, LocalExpertExchange covers a group of one.
#ifndef MOE_TRAINER_EXPERT_EXCHANGE_H_
#define MOE_TRAINER_EXPERT_EXCHANGE_H_

#include <cstring>
#include <string>
#include <vector>

#include "status.h"

namespace moe {

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int size() const = 0;  // ranks in the EP group
  virtual int rank() const = 0;
  // send[r * per_rank + i] goes to rank r; recv[s * per_rank + i] comes from rank s.
  virtual Status ExchangeCounts(const std::vector<size_t>& send, std::vector<size_t>* recv) = 0;
  // Rows of `width` floats: send_rows[r] rows (contiguous, in rank order) go to rank r;
  // recv_rows[s] rows arrive from rank s, in rank order.
  virtual Status ExchangeRows(const float* send, const std::vector<size_t>& send_rows,
                              float* recv, const std::vector<size_t>& recv_rows, int width) = 0;
  // The forward dispatch of token rows to their experts (same contract as ExchangeRows). It
  // may travel compressed (--compress-dispatch fp8): the experts then compute on, and their
  // weight gradients use, the decoded rows; the input gradient passes back through it as
  // through an identity (a straight-through estimator, as fp8 dispatch in DeepSeek-V3).
  virtual Status DispatchRows(const float* send, const std::vector<size_t>& send_rows,
                              float* recv, const std::vector<size_t>& recv_rows, int width) {
    return ExchangeRows(send, send_rows, recv, recv_rows, width);
  }
  // The forward combine of expert outputs back to their tokens (same contract). With
  // --compress-dispatch it travels in bf16, as DeepEP's and DeepSeek-V3's combine: the token
  // rows then sum the rounded outputs; the output gradient passes back through it as through
  // an identity. The backward exchanges (ExchangeRows) stay float32.
  virtual Status CombineRows(const float* send, const std::vector<size_t>& send_rows,
                             float* recv, const std::vector<size_t>& recv_rows, int width) {
    return ExchangeRows(send, send_rows, recv, recv_rows, width);
  }
  // What this rank has sent so far, one line per kind of traffic (dispatch, combine, backward):
  // calls, the rows' float32 bytes and the bytes on the wire to other ranks. Empty for a group
  // of one. Printed by --digest, so tests can see which exchanges travelled compressed.
  virtual std::string TrafficReport() const { return std::string(); }
};

class LocalExpertExchange : public ExpertExchange {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  Status ExchangeCounts(const std::vector<size_t>& send, std::vector<size_t>* recv) override {
    *recv = send;
    return Status();
  }
  Status ExchangeRows(const float* send, const std::vector<size_t>& send_rows, float* recv,
                      const std::vector<size_t>&, int width) override {
    if (recv != send && send_rows[0] > 0)
      std::memcpy(recv, send, send_rows[0] * width * sizeof(float));
    return Status();
  }
};

}  // namespace moe

#endif  // MOE_TRAINER_EXPERT_EXCHANGE_H_
