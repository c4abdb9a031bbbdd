// Status: the error type used everywhere inside weft (abseil-style).
//
// A Status carries a weftResult_t code and a message; each layer that passes an error upward
// may add context ("allreduce ring step 3: recv from rank 2: connection reset"). Statuses cross
// threads by value. They become weftResult_t + weftGetLastError() only at the API boundary.
#pragma once

#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "weft/weft.h"

namespace weft {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(weftResult_t code, std::string message)
      : code_(code),
        message_(code == weftSuccess && message.empty() ? nullptr
                                                        : std::make_unique<std::string>(std::move(message))) {}
  // The message lives on the heap, so a success is an int and a null pointer: every call
  // returns several Status values, and an inline std::string made each of them 40 bytes to
  // build and a branch to destroy (the tiny-collective path returns about twenty).
  Status(const Status& o) : code_(o.code_), message_(o.message_ ? std::make_unique<std::string>(*o.message_) : nullptr) {}
  Status(Status&& o) noexcept = default;
  Status& operator=(const Status& o) {
    if (this != &o) {
      code_ = o.code_;
      message_ = o.message_ ? std::make_unique<std::string>(*o.message_) : nullptr;
    }
    return *this;
  }
  Status& operator=(Status&& o) noexcept = default;

  bool ok() const { return code_ == weftSuccess; }
  weftResult_t code() const { return code_; }
  const std::string& message() const { return message_ ? *message_ : EmptyMessage(); }

  // Returns a copy with "context: " prepended to the message (no-op on success).
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message());
  }

 private:
  static const std::string& EmptyMessage() {
    static const std::string empty;
    return empty;
  }
  weftResult_t code_ = weftSuccess;
  std::unique_ptr<std::string> message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return Status(weftInvalidArgument, std::move(m)); }
inline Status InvalidUsage(std::string m) { return Status(weftInvalidUsage, std::move(m)); }
inline Status SystemError(std::string m) { return Status(weftSystemError, std::move(m)); }
inline Status InternalError(std::string m) { return Status(weftInternalError, std::move(m)); }

// Runs `body` (which returns a Status) and turns any C++ exception into a Status, so that none
// crosses the C API: an allocation sized from a huge count throws std::bad_alloc or
// std::length_error inside the standard library, and the caller must get an error, not an
// abort.
template <class F>
Status CatchExceptions(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return SystemError("out of memory (an allocation sized from the call's arguments failed)");
  } catch (const std::length_error& e) {
    return InvalidArgument(std::string("a size computed from the arguments is too large (") +
                           e.what() + ")");
  } catch (const std::exception& e) {
    return InternalError(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return InternalError("unexpected exception");
  }
}
inline Status RemoteError(std::string m) { return Status(weftRemoteError, std::move(m)); }
inline Status TimeoutError(std::string m) { return Status(weftTimeout, std::move(m)); }

// Reading a StatusOr's value while it holds an error is a bug in weft. The library must not
// abort, so by default this only logs (WEFT_WARN) and the default-constructed value is read;
// the test binaries install a handler that fails the running test (tests/status_guard.cc), so
// such a read fails loudly there.
using StatusOrMisuseHandler = void (*)(const Status& error);
// Returns the previous handler (nullptr: the default, log only).
StatusOrMisuseHandler SetStatusOrMisuseHandler(StatusOrMisuseHandler handler);
namespace internal {
void StatusOrMisuse(const Status& error);
}  // namespace internal

// A value or an error.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { Check(); return value_; }
  const T& value() const { Check(); return value_; }
  T& operator*() { Check(); return value_; }
  const T& operator*() const { Check(); return value_; }
  T* operator->() { Check(); return &value_; }
  const T* operator->() const { Check(); return &value_; }

 private:
  void Check() const {
    if (!status_.ok()) internal::StatusOrMisuse(status_);
  }
  Status status_;
  T value_{};
};

}  // namespace weft

#define WEFT_CONCAT_INNER(a, b) a##b
#define WEFT_CONCAT(a, b) WEFT_CONCAT_INNER(a, b)

// Returns from the enclosing function when expr yields a non-ok Status.
#define WEFT_RETURN_IF_ERROR(expr)                          \
  do {                                                      \
    ::weft::Status weft_status_ = (expr);                   \
    if (!weft_status_.ok()) return weft_status_;            \
  } while (0)

// Same, adding context to the message.
#define WEFT_RETURN_IF_ERROR_CTX(expr, ctx)                  \
  do {                                                       \
    ::weft::Status weft_status_ = (expr);                    \
    if (!weft_status_.ok()) return weft_status_.WithContext(ctx); \
  } while (0)

// lhs = value of a StatusOr expression, or return its error.
#define WEFT_ASSIGN_OR_RETURN(lhs, expr)                                    \
  auto WEFT_CONCAT(weft_so_, __LINE__) = (expr);                            \
  if (!WEFT_CONCAT(weft_so_, __LINE__).ok())                                \
    return WEFT_CONCAT(weft_so_, __LINE__).status();                        \
  lhs = std::move(WEFT_CONCAT(weft_so_, __LINE__).value())
