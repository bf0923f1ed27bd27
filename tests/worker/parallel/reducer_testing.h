#pragma once

// What the gradient reducer's tests share: the rank, and gradients whose
// sums and means over ranks are exact in float.

#include <cstdint>
#include <utility>
#include <vector>

#include "tests/worker/parallel/test_groups.h"

namespace dslaunch::worker::testing {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

using comm::testing::world_rank;
using comm::testing::world_size;

// Whole numbers plus quarters, different on every rank and pass: exactly
// representable, and so are their sums over up to 4 ranks, their means over
// a power-of-two number of ranks, and the sum of two passes' means.
inline float gradient(int rank, int pass, int64_t i) {
  return static_cast<float>(i % 613 - 300) + 0.25f * static_cast<float>(rank + 1) +
         8.0f * static_cast<float>(pass);
}

}  // namespace dslaunch::worker::testing
