#pragma once

// Whole-tensor sums as kernels (see elementwise_kernels.h for the form), in
// two launches so the result does not depend on how blocks are scheduled:
// each block of PartialSums writes its own partial sum, then FinishSum adds
// the partials in a fixed order.

#include <cstdint>

#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

// The most partial sums (blocks) the first launch writes.
inline constexpr int kMaxPartialSums = 256;

// partials[block] = the block's share of Σ x (or of Σ x² when `squares`), in
// double. Launch with shape(); it writes shape().grid partials.
struct PartialSums {
  double* partials;
  const float* x;
  int64_t n;
  bool squares;

  LaunchShape shape() const {
    LaunchShape s = grid_stride_shape(n, kMaxPartialSums);
    s.shared_bytes = s.block / kWarpSize * static_cast<int64_t>(sizeof(double));
    return s;
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    double sum = 0;
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) {
      const double value = x[i];
      sum += squares ? value * value : value;
    }
    sum = block_reduce(t, sum, t.template shared_memory<double>(), Sum<double>{});
    if (t.thread_index() == 0) partials[t.block_index()] = sum;
  }
};

// Adds `count` partial sums: total[0] = the sum (when total is not null),
// mean[0] = the sum / n rounded to float (when mean is not null).
struct FinishSum {
  const double* partials;
  int count;
  double* total;
  float* mean;
  int64_t n;

  LaunchShape shape() const {
    return {1, kMaxPartialSums, kMaxPartialSums / kWarpSize * static_cast<int64_t>(sizeof(double))};
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    double sum = 0;
    for (int i = t.thread_index(); i < count; i += t.block_size()) sum += partials[i];
    sum = block_reduce(t, sum, t.template shared_memory<double>(), Sum<double>{});
    if (t.thread_index() != 0) return;
    if (total != nullptr) total[0] = sum;
    if (mean != nullptr) mean[0] = static_cast<float>(sum / static_cast<double>(n));
  }
};

}  // namespace dslaunch::kernels::simt
