#pragma once

// Layer normalisation as kernels (see elementwise_kernels.h for the form):
// one warp per row for the row statistics and the input gradient, one
// thread per column for the parameter gradients (summed over the rows in
// order, as the CPU backend sums them).

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
    float sum = 0;
    for (int64_t c = t.lane(); c < C; c += kWarpSize) sum += x[c];
    const float m = warp_reduce(t, sum, Sum<float>{}) / static_cast<float>(C);
    float squares = 0;
    for (int64_t c = t.lane(); c < C; c += kWarpSize) {
      const float d = x[c] - m;
      squares += d * d;
    }
    const float r = math::layernorm_rstd(warp_reduce(t, squares, Sum<float>{}), C);
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
    float dnorm_sum = 0;
    float dnorm_norm_sum = 0;
    for (int64_t c = t.lane(); c < C; c += kWarpSize) {
      const float dnorm = weight[c] * dy[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * ((x[c] - m) * r);
    }
    const float dnorm_mean = warp_reduce(t, dnorm_sum, Sum<float>{}) / static_cast<float>(C);
    const float dnorm_norm_mean =
        warp_reduce(t, dnorm_norm_sum, Sum<float>{}) / static_cast<float>(C);
    for (int64_t c = t.lane(); c < C; c += kWarpSize) {
      const float norm = (x[c] - m) * r;
      dinp[row * C + c] +=
          math::layernorm_input_gradient(weight[c] * dy[c], norm, dnorm_mean, dnorm_norm_mean, r);
    }
  }
};

// dweight += Σ_rows norm · dout, dbias += Σ_rows dout, a thread per column.
struct LayernormBackwardParams {
  float* dweight;
  float* dbias;
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int64_t N;
  int64_t C;

  LaunchShape shape() const { return grid_stride_shape(C); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t c = grid_first(t); c < C; c += grid_stride(t)) {
      double dweight_sum = 0;
      double dbias_sum = 0;
      for (int64_t row = 0; row < N; ++row) {
        const float dy = dout[row * C + c];
        dweight_sum += ((inp[row * C + c] - mean[row]) * rstd[row]) * dy;
        dbias_sum += dy;
      }
      dweight[c] += static_cast<float>(dweight_sum);
      dbias[c] += static_cast<float>(dbias_sum);
    }
  }
};

}  // namespace dslaunch::kernels::simt
