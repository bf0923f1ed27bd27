#include "core/status.h"

namespace dslaunch::core {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kDataLoss:
      return "data loss";
    case StatusCode::kResourceExhausted:
      return "resource exhausted";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kDeadlineExceeded:
      return "deadline exceeded";
    case StatusCode::kFailedPrecondition:
      return "failed precondition";
    case StatusCode::kUnauthenticated:
      return "unauthenticated";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Status invalid_argument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
Status deadline_exceeded(std::string message) {
  return Status(StatusCode::kDeadlineExceeded, std::move(message));
}
Status failed_precondition(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}
Status internal_error(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

}  // namespace dslaunch::core
