#pragma once

#include <algorithm>
#include <cstdint>

namespace dslaunch::kernels::simt {

// A kernel's launch: grid blocks of `block` threads (1-D), each block with
// shared_bytes of dynamic shared memory.
struct LaunchShape {
  int grid = 1;
  int block = 1;
  int64_t shared_bytes = 0;
};

// Blocks of 256 threads, as many as cover n items one per thread, capped
// (the kernels loop over the grid: a grid-stride loop).
inline LaunchShape grid_stride_shape(int64_t n, int64_t max_grid = 4096) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, max_grid);
  return {static_cast<int>(blocks), static_cast<int>(kBlock), 0};
}

// One warp per row, eight rows per block of 256 threads.
inline LaunchShape warp_per_row_shape(int64_t rows) {
  constexpr int64_t kRowsPerBlock = 8;
  const int64_t blocks = std::max<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1);
  return {static_cast<int>(blocks), static_cast<int>(kRowsPerBlock * 32), 0};
}

// One block of 256 threads per row, with room for a block reduction of
// `Value`s.
template <class Value>
inline LaunchShape block_per_row_shape(int64_t rows) {
  constexpr int kBlock = 256;
  return {static_cast<int>(std::max<int64_t>(rows, 1)), kBlock,
          static_cast<int64_t>(kBlock / 32 * sizeof(Value))};
}

}  // namespace dslaunch::kernels::simt
