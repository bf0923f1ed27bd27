#pragma once

#include <cstddef>

// The size limits of the controller protocol, shared by the server
// (launcher/controller/controller_server.cc), the client
// (proto/controller_client.cc) and `dslaunch plan`/`run`, which refuse a spec
// too large to be sent.
namespace dslaunch::proto {

// The largest message either side sends or accepts. gRPC's default receive
// limit (4 MiB) is too small for a large resolved spec in a RegisterReply or
// the status of a job with thousands of ranks; a larger message is refused
// with RESOURCE_EXHAUSTED.
inline constexpr size_t kMaxMessageBytes = size_t{64} << 20;

// The largest resolved spec: half a message, leaving the rest of a
// RegisterReply (placement, resume point and its shard list) ample room.
inline constexpr size_t kMaxResolvedSpecBytes = kMaxMessageBytes / 2;

}  // namespace dslaunch::proto
