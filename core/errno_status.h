#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace dslaunch::core {

// The one place errno values become a Status: "<context>: <strerror text>",
// with a code the caller can act on: a full disk (ENOSPC, EDQUOT) or no
// memory is kResourceExhausted, a missing path kNotFound, a refused
// permission or a read-only file system kFailedPrecondition, an unreachable
// peer kUnavailable, ETIMEDOUT kDeadlineExceeded, EINVAL kInvalidArgument,
// anything else kIoError. 0 gives ok.
Status errno_status(int error_number, std::string_view context);

// strerror's text, without strerror's shared buffer.
std::string errno_text(int error_number);

}  // namespace dslaunch::core
