#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace dslaunch::core {

// What kind of failure a Status carries. The controller's restart policy and
// the worker's reports read the code; the message says what and where.
enum class StatusCode {
  kOk,
  kInvalidArgument,     // bad spec, input or call
  kNotFound,
  kIoError,
  kDataLoss,            // a checksum mismatch, a torn file
  kResourceExhausted,   // disk full, out of memory
  kUnavailable,         // a peer or the controller is gone (retryable)
  kDeadlineExceeded,    // a collective or a step past its timeout: a hang
  kFailedPrecondition,  // called in a state that does not allow it
  kUnauthenticated,     // a wrong or missing job token
  kInternal,            // a library failed in a way the caller cannot fix
};

std::string_view status_code_name(StatusCode code);  // "deadline exceeded", ...

// A success or a failure with its code and message (LevelDB and Abseil's
// shape, ours so that core/ needs no dependency).
class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // The same failure with `context` in front: "gradient all-reduce: <message>".
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status invalid_argument(std::string message);
Status deadline_exceeded(std::string message);
Status failed_precondition(std::string message);
Status internal_error(std::string message);

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}      // NOLINT: implicit by design
  StatusOr(Status status) : value_(std::move(status)) {}  // NOLINT: must not be ok()

  bool ok() const { return std::holds_alternative<T>(value_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(value_);
  }
  T& value() { return std::get<T>(value_); }
  const T& value() const { return std::get<T>(value_); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace dslaunch::core
