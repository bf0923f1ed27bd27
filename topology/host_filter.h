#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topology/hostfile.h"

namespace dslaunch::topology {

// A host and the slots (GPU indices, or CPU rank slots) a job may use on it.
struct HostSlots {
  std::string host;
  std::vector<int> slots;  // sorted, distinct
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
//  - then `num_nodes` (>= 1: keep the first N hosts; -1: all) and `num_gpus`
//    (>= 1: keep each host's first N slots; -1: all); asking for more than
//    there are is an error.
// A host with `slots=N` has slots 0..N-1. Pure; never throws.
ResourceSelection select_resources(const std::vector<HostfileEntry>& hosts,
                                   std::string_view include, std::string_view exclude,
                                   int num_nodes, int num_gpus);

}  // namespace dslaunch::topology
