// bucket_worker.h: a thread of the trainer's own that runs gradient-bucket reductions in the
// order they are handed over, so backward keeps computing while they run. Used for weft's
// compressed collectives, which (unlike plain weft calls on a host stream) run to completion
// on the calling thread; plain reductions still go to weft host streams.
#ifndef MOE_TRAINER_BUCKET_WORKER_H_
#define MOE_TRAINER_BUCKET_WORKER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "status.h"

namespace moe {

class BucketWorker {
 public:
  BucketWorker();
  ~BucketWorker();  // finishes queued work, then joins
  BucketWorker(const BucketWorker&) = delete;
  BucketWorker& operator=(const BucketWorker&) = delete;

  // Queues a task. After a task fails, later ones are skipped (their buffers would be
  // inconsistent anyway) until Wait() reports the failure.
  void Submit(std::function<Status()> task);
  // Blocks until every queued task ran; returns the first failure since the last Wait().
  Status Wait();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<Status()>> queue_;
  bool busy_ = false, stop_ = false;
  Status first_error_;
  std::thread thread_;
};

}  // namespace moe

#endif  // MOE_TRAINER_BUCKET_WORKER_H_
