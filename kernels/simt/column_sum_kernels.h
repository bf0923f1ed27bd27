#pragma once

// Column sums over many rows — a bias gradient, layer norm's parameter
// gradients — in two launches (see elementwise_kernels.h for the form), so
// that thousands of rows keep the whole GPU busy and the result still does
// not depend on how the blocks are scheduled: PartialColumnSums gives each
// block 32 columns of a chunk of kColumnSumRows rows and writes one partial
// sum per (chunk, column), in double; FinishColumnSums adds each column's
// partials in chunk order.

#include <algorithm>
#include <cstdint>

#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

inline constexpr int64_t kColumnSumRows = 256;  // rows per partial sum
inline constexpr int kColumnTile = 32;          // columns per block: one per lane
inline constexpr int kRowLanes = 8;             // threads per column in a block

// Rows of a chunk needing a partial sum each, for the caller's scratch:
// column_sum_chunks(rows) · Term::kValues · width doubles.
inline int64_t column_sum_chunks(int64_t rows) {
  return std::max<int64_t>((rows + kColumnSumRows - 1) / kColumnSumRows, 1);
}

// The values a Term gives for one (row, column).
template <int kCount>
struct ColumnValues {
  double value[kCount];
};

// A bias gradient's term: x (rows, width) itself.
struct PlainTerm {
  static constexpr int kValues = 1;
  const float* x;
  int64_t width;
  DSL_HOST_DEVICE ColumnValues<1> operator()(int64_t row, int64_t c) const {
    return {{x[row * width + c]}};
  }
};

// Layer norm's parameter gradients' terms: norm · dout (the weight's) and
// dout (the bias's), norm = (inp - mean) · rstd, rounded as the CPU backend
// rounds them.
struct LayernormParamTerm {
  static constexpr int kValues = 2;
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int64_t width;
  DSL_HOST_DEVICE ColumnValues<2> operator()(int64_t row, int64_t c) const {
    const float dy = dout[row * width + c];
    const float norm = (inp[row * width + c] - mean[row]) * rstd[row];
    return {{norm * dy, dy}};
  }
};

// partials[(chunk · kValues + k) · width + c] = the sum over the chunk's rows
// of term(row, c).value[k].
template <class Term>
struct PartialColumnSums {
  static constexpr int kValues = Term::kValues;
  double* partials;
  Term term;
  int64_t rows;
  int64_t width;

  int64_t tiles() const { return std::max<int64_t>((width + kColumnTile - 1) / kColumnTile, 1); }
  LaunchShape shape() const {
    return {static_cast<int>(tiles() * column_sum_chunks(rows)), kColumnTile * kRowLanes,
            static_cast<int64_t>(kColumnTile * kRowLanes * kValues * sizeof(double))};
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t tile_count = (width + kColumnTile - 1) / kColumnTile;
    const int64_t chunk = t.block_index() / tile_count;
    const int64_t column_in_tile = t.thread_index() % kColumnTile;
    const int64_t row_lane = t.thread_index() / kColumnTile;
    const int64_t c = (t.block_index() % tile_count) * kColumnTile + column_in_tile;
    const int64_t end = rows < (chunk + 1) * kColumnSumRows ? rows : (chunk + 1) * kColumnSumRows;
    double sums[kValues] = {};
    if (c < width) {
      for (int64_t row = chunk * kColumnSumRows + row_lane; row < end; row += kRowLanes) {
        const ColumnValues<kValues> values = term(row, c);
        for (int k = 0; k < kValues; ++k) sums[k] += values.value[k];
      }
    }
    // The row lanes' sums of each column, combined in lane order.
    double* shared = t.template shared_memory<double>();
    for (int k = 0; k < kValues; ++k) {
      shared[(k * kRowLanes + row_lane) * kColumnTile + column_in_tile] = sums[k];
    }
    t.sync_threads();
    if (row_lane != 0 || c >= width) return;
    for (int k = 0; k < kValues; ++k) {
      double total = 0;
      for (int lane = 0; lane < kRowLanes; ++lane) {
        total += shared[(k * kRowLanes + lane) * kColumnTile + column_in_tile];
      }
      partials[(chunk * kValues + k) * width + c] = total;
    }
  }
};

// out[k][c] += the sum of column c's partials of value k, in chunk order.
template <int kValues>
struct FinishColumnSums {
  const double* partials;
  int64_t chunks;
  int64_t width;
  float* out[kValues];

  LaunchShape shape() const { return grid_stride_shape(width); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t c = grid_first(t); c < width; c += grid_stride(t)) {
      for (int k = 0; k < kValues; ++k) {
        double total = 0;
        for (int64_t chunk = 0; chunk < chunks; ++chunk) {
          total += partials[(chunk * kValues + k) * width + c];
        }
        out[k][c] += static_cast<float>(total);
      }
    }
  }
};

}  // namespace dslaunch::kernels::simt
