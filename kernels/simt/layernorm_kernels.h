#pragma once

// Layer normalisation's row kernels (see elementwise_kernels.h for the
// form): one warp per row for the row statistics and the input gradient,
// summed in double as the CPU backend sums them. The parameter gradients
// are column sums (column_sum_kernels.h).

#include <cstdint>

#include "kernels/math/layernorm.h"
#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

struct LayernormForward {
  float* out;
  float* mean;
  float* rstd;
  const float* inp;
  const float* weight;
  const float* bias;
  int64_t N;
  int64_t C;

  LaunchShape shape() const { return warp_per_row_shape(N); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = warp_row(t);
    if (row >= N) return;  // the whole warp: no shuffle waits on it
    const float* x = inp + row * C;
    // In double, as the CPU backend: the variance keeps its precision when
    // the row's mean is large (the residual stream drifts).
    double sum = 0;
    for (int64_t c = t.lane(); c < C; c += kWarpSize) sum += x[c];
    const double mean_d = warp_reduce(t, sum, Sum<double>{}) / static_cast<double>(C);
    double squares = 0;
    for (int64_t c = t.lane(); c < C; c += kWarpSize) {
      const double d = x[c] - mean_d;
      squares += d * d;
    }
    const auto m = static_cast<float>(mean_d);
    const float r = math::layernorm_rstd(warp_reduce(t, squares, Sum<double>{}), C);
    for (int64_t c = t.lane(); c < C; c += kWarpSize) {
      out[row * C + c] = math::layernorm_output(x[c], m, r, weight[c], bias[c]);
    }
    if (t.lane() == 0) {
      mean[row] = m;
      rstd[row] = r;
    }
  }
};

// dinp += the input gradient, a warp per row.
struct LayernormBackwardInput {
  float* dinp;
  const float* dout;
  const float* inp;
  const float* weight;
  const float* mean;
  const float* rstd;
  int64_t N;
  int64_t C;

  LaunchShape shape() const { return warp_per_row_shape(N); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = warp_row(t);
    if (row >= N) return;
    const float* x = inp + row * C;
    const float* dy = dout + row * C;
    const float m = mean[row];
    const float r = rstd[row];
    double dnorm_sum = 0;
    double dnorm_norm_sum = 0;
    for (int64_t c = t.lane(); c < C; c += kWarpSize) {
      const float dnorm = weight[c] * dy[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * ((x[c] - m) * r);
    }
    const auto dnorm_mean =
        static_cast<float>(warp_reduce(t, dnorm_sum, Sum<double>{}) / static_cast<double>(C));
    const auto dnorm_norm_mean =
        static_cast<float>(warp_reduce(t, dnorm_norm_sum, Sum<double>{}) / static_cast<double>(C));
    for (int64_t c = t.lane(); c < C; c += kWarpSize) {
      const float norm = (x[c] - m) * r;
      dinp[row * C + c] +=
          math::layernorm_input_gradient(weight[c] * dy[c], norm, dnorm_mean, dnorm_norm_mean, r);
    }
  }
};

}  // namespace dslaunch::kernels::simt
