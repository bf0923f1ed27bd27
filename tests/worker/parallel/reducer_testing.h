#pragma once

// What the gradient reducer's tests share: the rank, and gradients whose
// sums and means over ranks are exact in float.

#include <mpi.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace dslaunch::worker::testing {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Whole numbers plus quarters, different on every rank and pass: exactly
// representable, and so are their sums over up to 4 ranks, their means over
// a power-of-two number of ranks, and the sum of two passes' means.
inline float gradient(int rank, int pass, int64_t i) {
  return static_cast<float>(i % 613 - 300) + 0.25f * static_cast<float>(rank + 1) +
         8.0f * static_cast<float>(pass);
}

}  // namespace dslaunch::worker::testing
