#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {

// Σ x² over elements [begin, end) of the layout that lie in `ranges` (all of
// them when it is empty; ModelStateInputs::norm_ranges); `grads`, in the
// backend's memory, holds the layout from element `base` on. Each range is
// one sum_of_squares() call, so states that hold the same gradients in other
// buffers get the same bits from it.
double sum_of_squares_in(kernels::Backend& backend, const float* grads, int64_t base, int64_t begin,
                         int64_t end, const std::vector<std::pair<int64_t, int64_t>>& ranges);

// The same over whole gradients (the layout from its start), summed
// partition by partition of `partition` in rank order: the additions a
// partitioned run makes (each rank's share, summed over the data group in
// rank order), so the norm has the same bits at every ZeRO stage.
double sum_of_squares_by_partition(kernels::Backend& backend, const float* grads,
                                   const ZeroPartition& partition,
                                   const std::vector<std::pair<int64_t, int64_t>>& ranges);

}  // namespace dslaunch::worker::engine
