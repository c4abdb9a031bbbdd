// status.h: the trainer's error type. Every function that can fail returns a Status; errors
// travel up to main(), which prints them and exits. Deep code never calls exit() (llm.c does;
// an embedded trainer must not).
#ifndef MOE_TRAINER_STATUS_H_
#define MOE_TRAINER_STATUS_H_

#include <string>
#include <utility>

namespace moe {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }
  // Adds context on the way up: "loading checkpoint: cannot open x".
  Status WithContext(const std::string& context) const {
    return failed_ ? Status(context + ": " + message_) : *this;
  }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

#define MOE_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::moe::Status moe_status_ = (expr);      \
    if (!moe_status_.ok()) return moe_status_; \
  } while (0)

}  // namespace moe

#endif  // MOE_TRAINER_STATUS_H_
