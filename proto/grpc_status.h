#pragma once

#include <grpcpp/support/status.h>

#include "core/status.h"

namespace dslaunch::proto {

// The one place gRPC statuses become core::Status, so that code outside
// proto/ never sees grpc::Status. The message is gRPC's error_message().
// UNAUTHENTICATED and PERMISSION_DENIED (a wrong or missing job token) are
// kUnauthenticated; CANCELLED and ABORTED, like UNAVAILABLE, mean the call
// or the controller went away (kUnavailable); codes with no counterpart are
// kInternal.
core::Status from_grpc(const grpc::Status& status);

// The reverse, for server code that produces a core::Status. kIoError, which
// gRPC has no code for, is INTERNAL: the caller cannot mend it.
grpc::Status to_grpc(const core::Status& status);

}  // namespace dslaunch::proto
