// moe_layer.cc: MoE forward and backward with dispatch/combine through an ExpertExchange.
//
// Forward:  route -> pack kept rows by global expert (so by destination rank) -> exchange
//           counts, then rows -> run each (source rank, local expert) segment through its
//           expert -> exchange outputs back -> out = shared(x) + sum_j gate_j * y_j.
// Backward: the same path reversed: gate-weighted output gradients go to the experts, input
//           gradients come back; the router gets dgate_j = <dout, y_j>.
// Each (source rank, expert) segment is its own matrix product, so an expert computes exactly
// what it would for that rank's tokens alone: EP changes where the work runs, not the bits.
#include "moe_layer.h"

#include <cstring>

#include "blas.h"
#include "thread_pool.h"

namespace moe {
namespace {

std::vector<size_t> RowsPerRank(const std::vector<size_t>& per_expert, int ranks) {
  std::vector<size_t> rows(ranks, 0);
  const size_t per_rank = per_expert.size() / ranks;
  for (size_t i = 0; i < per_expert.size(); ++i) rows[i / per_rank] += per_expert[i];
  return rows;
}

// Assigns dispatch rows: grouped by global expert, tokens in order within an expert.
void PlanDispatch(const ModelConfig& m, int tokens, MoeActivations* a) {
  const int k = m.top_k, E = m.experts;
  a->send_counts.assign(E, 0);
  a->slot.assign(static_cast<size_t>(tokens) * k, -1);
  for (int i = 0; i < tokens * k; ++i)
    if (a->router.kept[i]) a->send_counts[a->router.choice[i]]++;
  std::vector<size_t> next(E, 0);
  for (int e = 1; e < E; ++e) next[e] = next[e - 1] + a->send_counts[e - 1];
  for (int i = 0; i < tokens * k; ++i)
    if (a->router.kept[i]) a->slot[i] = static_cast<int>(next[a->router.choice[i]]++);
}

// Calls fn(expert_local, first_row, rows) for every received segment, in buffer order.
template <typename Fn>
void ForEachSegment(const MoeActivations& a, int local_experts, Fn fn) {
  size_t row = 0;
  for (size_t i = 0; i < a.recv_counts.size(); ++i) {
    const size_t rows = a.recv_counts[i];
    if (rows > 0) fn(static_cast<int>(i % local_experts), row, rows);
    row += rows;
  }
}

// The shared expert's partial [N, C] output (or input gradient) summed over the tensor-
// parallel group into the held rows of out; written straight into out when it holds them all.
template <typename Compute>
Status SharedIntoHeldRows(TensorParallel* tp, int N, int C, MoeActivations* a, float* out,
                          Compute compute) {
  const HeldRows held = RowsHeld(tp, N);
  float* partial = out;
  if (held.count < N) {
    a->shared_y.resize(static_cast<size_t>(N) * C);
    partial = a->shared_y.data();
  }
  compute(partial);
  float* sum = nullptr;
  MOE_RETURN_IF_ERROR(ReduceToHeldRows(tp, partial, N, C, &sum));
  if (sum != out) std::memcpy(out, sum, sizeof(float) * held.count * C);
  return Status();
}

size_t Sum(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}

SwigluWeights ExpertWeights(const ModelConfig& m, const MoeWeights& w, int e) {
  const long block = static_cast<long>(m.dim) * m.expert_hidden;
  return SwigluWeights{w.expert_w1 + e * block, w.expert_w3 + e * block, w.expert_w2 + e * block};
}

}  // namespace

Status MoeForward(const ModelConfig& m, const MoeWeights& w, const float* xn, int sequences,
                  const float* router_bias, const LossScale& scale, ExpertExchange* exchange,
                  MoeActivations* a, float* out, TensorParallel* tp) {
  const int N = sequences * m.seq_len, C = m.dim, F = m.expert_hidden, E = m.experts,
            k = m.top_k, ranks = exchange->size();
  a->logits.resize(static_cast<size_t>(N) * E);
  Matmul(xn, Trans::kNo, w.router, Trans::kNo, a->logits.data(), N, E, C, false);
  RouterForward(m, a->logits.data(), router_bias, sequences, scale, &a->router);
  PlanDispatch(m, N, a);
  // Dispatch: pack, exchange counts and rows.
  a->send_x.resize(Sum(a->send_counts) * C);
  for (int i = 0; i < N * k; ++i)
    if (a->slot[i] >= 0)
      std::memcpy(&a->send_x[static_cast<size_t>(a->slot[i]) * C], xn + static_cast<long>(i / k) * C,
                  C * sizeof(float));
  MOE_RETURN_IF_ERROR(exchange->ExchangeCounts(a->send_counts, &a->recv_counts));
  const size_t recv_rows = Sum(a->recv_counts);
  a->recv_x.resize(recv_rows * C);
  MOE_RETURN_IF_ERROR(exchange->DispatchRows(a->send_x.data(), RowsPerRank(a->send_counts, ranks),
                                             a->recv_x.data(), RowsPerRank(a->recv_counts, ranks), C));
  // Experts, one segment at a time.
  a->recv_h1.resize(recv_rows * F);
  a->recv_h3.resize(recv_rows * F);
  a->recv_y.resize(recv_rows * C);
  ForEachSegment(*a, w.local_experts, [&](int e, size_t row, size_t rows) {
    SwigluForward(&a->recv_x[row * C], static_cast<int>(rows), C, F, ExpertWeights(m, w, e),
                  &a->recv_h1[row * F], &a->recv_h3[row * F], &a->recv_y[row * C], &a->scratch);
  });
  // Combine: outputs come back in dispatch order.
  a->send_y.resize(a->send_x.size());
  MOE_RETURN_IF_ERROR(exchange->CombineRows(a->recv_y.data(), RowsPerRank(a->recv_counts, ranks),
                                            a->send_y.data(), RowsPerRank(a->send_counts, ranks), C));
  const int Fs = w.shared_hidden;
  const HeldRows held = RowsHeld(tp, N);
  if (Fs > 0) {
    a->shared_h1.resize(static_cast<size_t>(N) * Fs);
    a->shared_h3.resize(a->shared_h1.size());
    MOE_RETURN_IF_ERROR(SharedIntoHeldRows(tp, N, C, a, out, [&](float* partial) {
      SwigluForward(xn, N, C, Fs, w.shared, a->shared_h1.data(), a->shared_h3.data(), partial,
                    &a->scratch);
    }));
  } else {
    std::memset(out, 0, sizeof(float) * held.count * C);
  }
  ParallelFor(held.count, static_cast<long>(held.count) * k * C > 65536, [&](long lo, long hi) {
    for (int t = held.first + static_cast<int>(lo); t < held.first + hi; ++t)
      for (int j = 0; j < k; ++j) {
        const int slot = a->slot[t * k + j];
        if (slot < 0) continue;
        const float g = a->router.gate[t * k + j];
        const float* y = &a->send_y[static_cast<size_t>(slot) * C];
        float* o = out + static_cast<long>(t - held.first) * C;
        for (int c = 0; c < C; ++c) o[c] += g * y[c];
      }
  });
  return Status();
}

Status MoeBackward(const ModelConfig& m, const MoeWeights& w, const float* xn, int sequences,
                   const LossScale& scale, ExpertExchange* exchange, const float* dout,
                   MoeActivations* a, float* dxn, const MoeGrads& g, TensorParallel* tp) {
  const int N = sequences * m.seq_len, C = m.dim, F = m.expert_hidden, E = m.experts,
            k = m.top_k, ranks = exchange->size();
  // Gradients of the combine: to the expert outputs and to the gates.
  a->d_send.assign(a->send_x.size(), 0.0f);
  a->dgate.assign(static_cast<size_t>(N) * k, 0.0f);
  ParallelFor(N, static_cast<long>(N) * k * C > 65536, [&](long lo, long hi) {
    for (int t = static_cast<int>(lo); t < hi; ++t)
      for (int j = 0; j < k; ++j) {
        const int slot = a->slot[t * k + j];
        if (slot < 0) continue;
        const float gate = a->router.gate[t * k + j];
        const float* d = dout + static_cast<long>(t) * C;
        const float* y = &a->send_y[static_cast<size_t>(slot) * C];
        float* dy = &a->d_send[static_cast<size_t>(slot) * C];
        float dot = 0.0f;
        for (int c = 0; c < C; ++c) {
          dot += d[c] * y[c];
          dy[c] = gate * d[c];
        }
        a->dgate[t * k + j] = dot;
      }
  });
  const std::vector<size_t> send_rows = RowsPerRank(a->send_counts, ranks);
  const std::vector<size_t> recv_rows = RowsPerRank(a->recv_counts, ranks);
  a->d_recv.resize(a->recv_x.size());
  MOE_RETURN_IF_ERROR(exchange->ExchangeRows(a->d_send.data(), send_rows, a->d_recv.data(),
                                             recv_rows, C));
  // Experts backward: d_recv holds dy on the way in and dx on the way out (per segment).
  std::vector<float> dx_segment;
  const long block = static_cast<long>(C) * F;
  ForEachSegment(*a, w.local_experts, [&](int e, size_t row, size_t rows) {
    dx_segment.resize(rows * C);
    SwigluBackward(&a->recv_x[row * C], static_cast<int>(rows), C, F, ExpertWeights(m, w, e),
                   &a->recv_h1[row * F], &a->recv_h3[row * F], &a->d_recv[row * C],
                   dx_segment.data(),
                   SwigluGrads{g.expert_w1 + e * block, g.expert_w3 + e * block,
                               g.expert_w2 + e * block},
                   &a->scratch);
    std::memcpy(&a->d_recv[row * C], dx_segment.data(), rows * C * sizeof(float));
  });
  MOE_RETURN_IF_ERROR(exchange->ExchangeRows(a->d_recv.data(), recv_rows, a->d_send.data(),
                                             send_rows, C));
  // Input gradient of the held rows: shared expert, then each kept choice in order, then the
  // router.
  const HeldRows held = RowsHeld(tp, N);
  if (w.shared_hidden > 0) {
    MOE_RETURN_IF_ERROR(SharedIntoHeldRows(tp, N, C, a, dxn, [&](float* partial) {
      SwigluBackward(xn, N, C, w.shared_hidden, w.shared, a->shared_h1.data(),
                     a->shared_h3.data(), dout, partial, g.shared, &a->scratch);
    }));
  } else {
    std::memset(dxn, 0, sizeof(float) * held.count * C);
  }
  ParallelFor(held.count, static_cast<long>(held.count) * k * C > 65536, [&](long lo, long hi) {
    for (int t = held.first + static_cast<int>(lo); t < held.first + hi; ++t)
      for (int j = 0; j < k; ++j) {
        const int slot = a->slot[t * k + j];
        if (slot < 0) continue;
        const float* d = &a->d_send[static_cast<size_t>(slot) * C];
        float* dx = dxn + static_cast<long>(t - held.first) * C;
        for (int c = 0; c < C; ++c) dx[c] += d[c];
      }
  });
  a->dlogits.resize(static_cast<size_t>(N) * E);
  RouterBackward(m, a->logits.data(), a->router, a->dgate.data(), sequences, scale,
                 a->dlogits.data());
  Matmul(xn, Trans::kYes, a->dlogits.data(), Trans::kNo, g.router, C, E, N, true);
  Matmul(a->dlogits.data() + static_cast<long>(held.first) * E, Trans::kNo, w.router,
         Trans::kYes, dxn, held.count, C, E, true);
  return Status();
}

}  // namespace moe
