#pragma once

// The row kernels between attention's matrix products (the products are
// model_gemms.h's attention descriptors): the causal softmax of the scaled
// scores and its backward pass, one warp per row of a head's att (B,T,T).

#include <math.h>

#include <cstdint>

#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

// Row r of att (query position t = r % T): softmax over columns [0, t], 0 in
// (t, T). In place: att holds the scaled scores on entry.
struct CausalSoftmax {
  float* att;
  int64_t rows;  // B·T (or any multiple of T)
  int64_t T;

  LaunchShape shape() const { return warp_per_row_shape(rows); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = warp_row(t);
    if (row >= rows) return;
    float* a = att + row * T;
    const int64_t visible = row % T + 1;
    float max = -INFINITY;
    for (int64_t j = t.lane(); j < visible; j += kWarpSize) max = a[j] > max ? a[j] : max;
    max = warp_reduce(t, max, Max<float>{});
    double sum = 0;
    for (int64_t j = t.lane(); j < visible; j += kWarpSize) sum += expf(a[j] - max);
    const auto inverse = static_cast<float>(1.0 / warp_reduce(t, sum, Sum<double>{}));
    for (int64_t j = t.lane(); j < T; j += kWarpSize) {
      a[j] = j < visible ? expf(a[j] - max) * inverse : 0.0f;
    }
  }
};

// The softmax's backward pass in place on d (B·T, T), the gradient of
// att on entry: d[j] = att[j] · (d[j] - Σ_k att[k]·d[k]).
struct SoftmaxBackwardRows {
  float* d;
  const float* att;
  int64_t rows;
  int64_t T;

  LaunchShape shape() const { return warp_per_row_shape(rows); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = warp_row(t);
    if (row >= rows) return;
    float* dr = d + row * T;
    const float* a = att + row * T;
    double dot = 0;
    for (int64_t j = t.lane(); j < T; j += kWarpSize) dot += a[j] * dr[j];
    const auto dot_f = static_cast<float>(warp_reduce(t, dot, Sum<double>{}));
    for (int64_t j = t.lane(); j < T; j += kWarpSize) dr[j] = a[j] * (dr[j] - dot_f);
  }
};

}  // namespace dslaunch::kernels::simt
