// thread_pool.h: the trainer's compute threads. ParallelFor splits a loop into one contiguous
// range per thread (static, so which thread computes what never changes results: every use
// writes disjoint outputs). Idle workers sleep on a condition variable instead of spinning.
// Why not OpenMP: on the shared 2-core VM libgomp's spin-waiting workers (and OpenBLAS's own
// pthread pool beside them) burned 72% of a 2-thread run's CPU samples while the thread with
// the work waited for a core; sleeping workers cost a wake-up per loop instead.
#ifndef MOE_TRAINER_THREAD_POOL_H_
#define MOE_TRAINER_THREAD_POOL_H_

#include <functional>

namespace moe {

// Threads for the trainer's loops and matrix products (1 = everything on the caller).
void SetPoolThreads(int threads);
int PoolThreads();

// Runs body(part, parts) for every part in [0, parts) on the pool, the caller taking part 0,
// and returns when all are done. Called from inside a part (nested), it runs serially.
void RunOnPool(const std::function<void(int part, int parts)>& body);

// body(begin, end) over [0, n) split in contiguous ranges, one per thread; serial when
// `worth_it` is false (too little work to pay for waking a thread).
template <typename Body>
void ParallelFor(long n, bool worth_it, const Body& body) {
  if (!worth_it || PoolThreads() == 1 || n < 2) {
    body(0L, n);
    return;
  }
  RunOnPool([&](int part, int parts) {
    const long chunk = (n + parts - 1) / parts;
    const long begin = part * chunk, end = begin + chunk < n ? begin + chunk : n;
    if (begin < end) body(begin, end);
  });
}

}  // namespace moe

#endif  // MOE_TRAINER_THREAD_POOL_H_
