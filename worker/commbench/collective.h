#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dslaunch::worker::commbench {

// The collectives commbench measures, each on float32 buffers.
enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all };

// "all_reduce", "all_gather", "reduce_scatter", "all_to_all".
std::string_view collective_name(Collective collective);
std::optional<Collective> parse_collective(std::string_view name);  // std::nullopt if unknown

// The buffers of one measurement on each rank of a group, in float32 elements.
struct Message {
  // The size reported, as nccl-tests defines it: all_reduce and all_to_all
  // the buffer, all_gather the output (ranks·chunk), reduce_scatter the input
  // (ranks·chunk).
  int64_t bytes = 0;
  int64_t send_count = 0;  // elements of each rank's input
  int64_t recv_count = 0;  // elements of each rank's output
  // The count argument of the MPI call: the whole buffer for all_reduce, the
  // block one rank contributes or receives for the others.
  int64_t chunk = 0;
  bool operator==(const Message&) const = default;
};

// The message closest to `requested_bytes` from below for `collective` on a
// group of `ranks` (>= 1): whole float32 elements, and for all but
// all_reduce a multiple of `ranks` elements. std::nullopt when that leaves
// no element to send.
std::optional<Message> message_for(Collective collective, int64_t requested_bytes, int ranks);

}  // namespace dslaunch::worker::commbench
