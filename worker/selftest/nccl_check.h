#pragma once

// `dslaunch selftest`'s NCCL part: the NCCL communicator's collectives on
// buffers in the GPU's memory against the MPI communicator's on the same
// values in host memory, over the same group.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::selftest {

struct NcclCheck {
  std::string collective;  // "all_reduce", "reduce_scatter (uneven)", ...
  // The largest |NCCL - MPI| over the largest |MPI| (infinite for a NaN).
  double error = 0;
  double tolerance = 0;
  std::string failure;  // an operation that failed; "" when both ran
  bool passed() const { return failure.empty() && error <= tolerance; }
};

// `device`: the GPU's backend (its memory holds NCCL's buffers); `host`: an
// MPI communicator over the group, over which the NCCL communicator is
// bootstrapped. Collective over `host`.
std::vector<NcclCheck> check_nccl(kernels::Backend& device, comm::Communicator& host,
                                  uint32_t seed);

}  // namespace dslaunch::worker::selftest
