#include "core/errno_status.h"

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

TEST_CASE("errno_status keeps strerror's message shape: '<context>: <text>'") {
  const Status status = errno_status(ENOENT, "cannot open 'spec.yaml'");
  CHECK(status.code() == StatusCode::kNotFound);
  CHECK(status.message() == "cannot open 'spec.yaml': No such file or directory");
  CHECK(errno_status(ENOSPC, "cannot write 'x'").message() ==
        "cannot write 'x': No space left on device");
}

TEST_CASE("errno_status maps each errno to the code a caller acts on") {
  const std::vector<std::pair<int, StatusCode>> cases = {
      {ENOSPC, StatusCode::kResourceExhausted},
      {EDQUOT, StatusCode::kResourceExhausted},
      {ENOMEM, StatusCode::kResourceExhausted},
      {ENOENT, StatusCode::kNotFound},
      {ENOTDIR, StatusCode::kNotFound},
      {EACCES, StatusCode::kFailedPrecondition},
      {EPERM, StatusCode::kFailedPrecondition},
      {EROFS, StatusCode::kFailedPrecondition},
      {EIO, StatusCode::kIoError},
      {ESTALE, StatusCode::kIoError},
      {EINVAL, StatusCode::kInvalidArgument},
      {ETIMEDOUT, StatusCode::kDeadlineExceeded},
      {ECONNREFUSED, StatusCode::kUnavailable},
      {EHOSTUNREACH, StatusCode::kUnavailable},
      {ENETUNREACH, StatusCode::kUnavailable},
      {EBADF, StatusCode::kIoError},  // anything else
  };
  for (const auto& [error_number, code] : cases) {
    INFO("errno " << error_number << ": " << errno_text(error_number));
    CHECK(errno_status(error_number, "context").code() == code);
  }
}

TEST_CASE("errno_status of 0 is ok") { CHECK(errno_status(0, "nothing failed").ok()); }

TEST_CASE("errno_text is strerror's text, an unknown number included") {
  CHECK(errno_text(EACCES) == "Permission denied");
  CHECK(errno_text(EIO) == "Input/output error");
  CHECK(errno_text(123456) == "Unknown error 123456");
}

}  // namespace
}  // namespace dslaunch::core
