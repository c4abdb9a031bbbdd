// The StatusOr misuse hook (see status.h): log by default, a test handler fails the test.
#include "common/status.h"

#include <atomic>

#include "common/log.h"

namespace weft {
namespace {
std::atomic<StatusOrMisuseHandler> g_misuse_handler{nullptr};
}  // namespace

StatusOrMisuseHandler SetStatusOrMisuseHandler(StatusOrMisuseHandler handler) {
  return g_misuse_handler.exchange(handler);
}

namespace internal {
void StatusOrMisuse(const Status& error) {
  if (StatusOrMisuseHandler h = g_misuse_handler.load()) {
    h(error);
    return;
  }
  WEFT_WARN("internal: a StatusOr value was read while it holds an error: %s",
            error.message().c_str());
}
}  // namespace internal

}  // namespace weft
