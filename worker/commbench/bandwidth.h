#pragma once

#include <cstdint>

#include "worker/commbench/collective.h"

namespace dslaunch::worker::commbench {

// nccl-tests' bus-bandwidth factor for `collective` on `ranks` (>= 1) ranks:
// all_reduce 2(n-1)/n; all_gather, reduce_scatter and all_to_all (n-1)/n.
// It turns the algorithm bandwidth into what each link carried, comparable
// across group sizes and with the hardware's peak.
double bus_factor(Collective collective, int ranks);

// Both in GB/s (1e9 bytes per second), as nccl-tests prints them.
struct Bandwidth {
  double algbw_gbs = 0;  // bytes / seconds
  double busbw_gbs = 0;  // algbw · bus_factor
};

// The bandwidths of moving Message::bytes `bytes` in `seconds` per call;
// zeros when `seconds` is not positive.
Bandwidth bandwidth(Collective collective, int64_t bytes, int ranks, double seconds);

}  // namespace dslaunch::worker::commbench
