#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "topology/hostfile.h"

namespace dslaunch::topology {

// The most ranks (selected slots) dslaunch plans: 2^21, 16x the largest
// clusters trained on today. A larger selection is a typo in the slots, and
// building it would exhaust memory. This is the one declaration of the cap:
// select_resources enforces it, and launcher/plan should use it rather than a
// copy of its own.
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 21;

// A host and the slots (GPU indices, or CPU rank slots) a job may use on it.
struct HostSlots {
  std::string host;
  std::vector<int> slots;  // sorted, distinct
  // The host's slots before filters (its `slots=N`): slots are all below it.
  // Tells placement how many GPUs the host has when only some are selected.
  // 0 when unknown; placement then assumes slots.back() + 1.
  int total_slots = 0;
};

struct ResourceSelection {
  std::vector<std::string> errors;  // empty on success
  std::vector<HostSlots> hosts;     // hostfile order; empty when errors is not
};

// Selects the resources a job uses, with DeepSpeed's launcher semantics:
//  - `include` / `exclude`: `host`, `host:0,2`, several joined by `@`;
//    repeated hosts merge; both at once is an error; an unknown host or slot
//    is an error; `include` of a bare host takes all its slots, `exclude` of
//    a bare host removes it, and a host left without slots is dropped;
//  - or, without include and exclude, `num_nodes` (>= 1: keep the first N
//    hosts; -1: all) and `num_gpus` (>= 1: keep each host's first N slots;
//    -1: all); asking for more than there are is an error. Either of them
//    with include or exclude is an error, as DeepSpeed's "Cannot specify
//    num_nodes/gpus with include/exclude".
// A host with `slots=N` has slots 0..N-1, and total_slots N in the result.
// Host names must be valid (valid_host_name). A selection of more than
// kMaxWorldSize slots is an error found before any slot list is built, so
// huge slot counts cost no memory. Every error message starts with the input
// it is about ("include: ...", "num_gpus ...") when there is one. Pure; never
// throws.
ResourceSelection select_resources(const std::vector<HostfileEntry>& hosts,
                                   std::string_view include, std::string_view exclude,
                                   int num_nodes, int num_gpus);

}  // namespace dslaunch::topology
