#pragma once

// The row softmaxes of the CUDA backend's attention (simt_backend.h), which
// runs its products through cuBLAS over a block of query rows at a time:
// each kernel takes one row of a block of scores or probabilities, a warp
// per row (see elementwise_kernels.h for the form).
//
// A block of scores holds, for each of `batch` sequences (batch_stride
// floats apart), `rows` query rows (`ld` floats apart) starting at query
// position `first`, each as wide as the block's last row sees: `first +
// rows` keys. Row i sees keys [0, first + i] under the causal mask.

#include <math.h>

#include <cstdint>

#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

struct ScoreRows {
  int64_t batch;
  int64_t rows;
  int64_t first;
  int64_t ld;
  int64_t batch_stride;

  DSL_HOST_DEVICE int64_t count() const { return batch * rows; }
  DSL_HOST_DEVICE int64_t width() const { return first + rows; }
  // Row `index` (of count()): its offset and the keys it sees.
  DSL_HOST_DEVICE int64_t offset(int64_t index) const {
    return index / rows * batch_stride + index % rows * ld;
  }
  DSL_HOST_DEVICE int64_t seen(int64_t index) const { return first + index % rows + 1; }
};

// In place, scores to probabilities: p[0, seen) = softmax(s[0, seen)),
// p[seen, width) = 0, as the CPU backend's causal softmax row (the sum in
// double).
struct CausalSoftmaxRows {
  float* scores;
  ScoreRows rows;

  LaunchShape shape() const { return warp_per_row_shape(rows.count()); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = warp_row(t);
    if (row >= rows.count()) return;  // the whole warp: no shuffle waits on it
    float* x = scores + rows.offset(row);
    const int64_t seen = rows.seen(row);
    float max = -INFINITY;
    for (int64_t j = t.lane(); j < seen; j += kWarpSize) max = x[j] > max ? x[j] : max;
    max = warp_reduce(t, max, Max<float>{});
    double sum = 0;
    for (int64_t j = t.lane(); j < seen; j += kWarpSize) sum += expf(x[j] - max);
    const auto inverse = static_cast<float>(1.0 / warp_reduce(t, sum, Sum<double>{}));
    for (int64_t j = t.lane(); j < rows.width(); j += kWarpSize) {
      x[j] = j < seen ? expf(x[j] - max) * inverse : 0.0f;
    }
  }
};

// In place, the probabilities' gradient to the scores' (before the scale):
// d[j] = p[j] · (d[j] - Σ p·d) over the keys seen, 0 beyond, as the CPU
// backend's softmax backward row (the sum in double, applied in float).
struct CausalSoftmaxBackwardRows {
  float* grads;
  const float* probs;
  ScoreRows rows;

  LaunchShape shape() const { return warp_per_row_shape(rows.count()); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = warp_row(t);
    if (row >= rows.count()) return;
    float* d = grads + rows.offset(row);
    const float* p = probs + rows.offset(row);
    const int64_t seen = rows.seen(row);
    double dot = 0;
    for (int64_t j = t.lane(); j < seen; j += kWarpSize) dot += p[j] * d[j];
    const auto dot_f = static_cast<float>(warp_reduce(t, dot, Sum<double>{}));
    for (int64_t j = t.lane(); j < rows.width(); j += kWarpSize) {
      d[j] = j < seen ? p[j] * (d[j] - dot_f) : 0.0f;
    }
  }
};

}  // namespace dslaunch::kernels::simt
