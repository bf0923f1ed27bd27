#pragma once

// Element-wise kernels, written once for the GPU (kernels/cuda) and the
// emulator (emulator.h): each is a struct holding its arguments, with the
// launch shape it needs and the body one thread runs. The per-element math
// is kernels/math's, the CPU backend's own.

#include <cstdint>

#include "kernels/math/cross_entropy.h"
#include "kernels/math/gelu.h"
#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

struct GeluForward {
  float* out;
  const float* inp;
  int64_t n;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) out[i] = math::gelu(inp[i]);
  }
};

struct GeluBackward {
  float* dinp;
  const float* inp;
  const float* dout;
  int64_t n;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) {
      dinp[i] += math::gelu_derivative(inp[i]) * dout[i];
    }
  }
};

struct ResidualForward {
  float* out;
  const float* a;
  const float* b;
  int64_t n;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) out[i] = a[i] + b[i];
  }
};

struct ResidualBackward {
  float* da;
  float* db;
  const float* dout;
  int64_t n;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) {
      da[i] += dout[i];
      db[i] += dout[i];
    }
  }
};

struct Scale {
  float* x;
  int64_t n;
  float factor;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) x[i] *= factor;
  }
};

struct Divide {
  float* x;
  int64_t n;
  float divisor;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) x[i] /= divisor;
  }
};

struct Fill {
  float* x;
  int64_t n;
  float value;

  LaunchShape shape() const { return grid_stride_shape(n); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < n; i += grid_stride(t)) x[i] = value;
  }
};

// Every row of out (rows, width) = bias (width): where a linear layer's
// product then accumulates (beta 1).
struct BroadcastRows {
  float* out;
  const float* bias;
  int64_t rows;
  int64_t width;

  LaunchShape shape() const { return grid_stride_shape(rows * width); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < rows * width; i += grid_stride(t)) out[i] = bias[i % width];
  }
};

// dlogits (N,Vp) += (probs - onehot(target)) · dlosses over each row's
// first V columns; column j is token vocab_begin + j.
struct CrossentropySoftmaxBackward {
  float* dlogits;
  const float* dlosses;
  const float* probs;
  const int32_t* targets;
  int64_t vocab_begin;
  int64_t N;
  int64_t V;
  int64_t Vp;

  LaunchShape shape() const { return grid_stride_shape(N * V); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    for (int64_t i = grid_first(t); i < N * V; i += grid_stride(t)) {
      const int64_t row = i / V;
      const int64_t column = i % V;
      const bool is_target = static_cast<int64_t>(targets[row]) - vocab_begin == column;
      dlogits[row * Vp + column] +=
          math::crossentropy_logit_gradient(probs[row * Vp + column], is_target, dlosses[row]);
    }
  }
};

}  // namespace dslaunch::kernels::simt
