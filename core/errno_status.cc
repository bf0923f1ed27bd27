#include "core/errno_status.h"

#include <cerrno>
#include <cstring>

namespace dslaunch::core {
namespace {

// glibc's strerror_r returns the text (GNU); POSIX's writes it into `buffer`.
[[maybe_unused]] std::string strerror_r_text(const char* text, const char*, int) { return text; }
[[maybe_unused]] std::string strerror_r_text(int failure, const char* buffer, int error_number) {
  return failure == 0 ? buffer : "Unknown error " + std::to_string(error_number);
}

StatusCode errno_code(int error_number) {
  switch (error_number) {
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return StatusCode::kResourceExhausted;
    case ENOENT:
    case ENOTDIR:
      return StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return StatusCode::kFailedPrecondition;
    case EINVAL:
      return StatusCode::kInvalidArgument;
    case ETIMEDOUT:
      return StatusCode::kDeadlineExceeded;
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return StatusCode::kUnavailable;
    default:  // EIO, ESTALE and the rest
      return StatusCode::kIoError;
  }
}

}  // namespace

std::string errno_text(int error_number) {
  char buffer[256] = {};
  return strerror_r_text(strerror_r(error_number, buffer, sizeof buffer), buffer, error_number);
}

Status errno_status(int error_number, std::string_view context) {
  if (error_number == 0) return {};
  return Status(errno_code(error_number), std::string(context) + ": " + errno_text(error_number));
}

}  // namespace dslaunch::core
