// attnkit/status.hpp — the error type returned by every public entry point.
#pragma once
#include <string>
#include <utility>

namespace attnkit {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something the op cannot accept (message names it)
  kUnsupported,      // valid input, but this backend has no implementation for it
  kBackendError,     // a CUDA or runtime call failed
};

// A Status is either ok() or carries a code and a message naming the argument at fault and
// what was expected, e.g. "q: expected 4 dims [B, Sq, Hq, D], got 3".
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
inline Status Unsupported(std::string msg) { return {StatusCode::kUnsupported, std::move(msg)}; }

}  // namespace attnkit

// Returns early from the enclosing function when `expr` is not ok.
#define ATTNKIT_RETURN_IF_ERROR(expr)             \
  do {                                            \
    ::attnkit::Status _attnkit_st = (expr);       \
    if (!_attnkit_st.ok()) return _attnkit_st;    \
  } while (0)
