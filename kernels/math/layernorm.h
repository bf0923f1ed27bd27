#pragma once

// Layer normalisation's per-row and per-element math, shared by the CPU
// backend's row loops and the CUDA kernels (which reduce a row across a
// warp instead of a vector loop).

#include <math.h>

#include <cstdint>

#include "kernels/simt/host_device.h"

namespace dslaunch::kernels::math {

inline constexpr double kLayernormEps = 1e-5;  // GPT-2's

// 1 / sqrt(variance + eps) from the sum of squared deviations of C values.
DSL_HOST_DEVICE inline float layernorm_rstd(double squared_deviations, int64_t C) {
  return static_cast<float>(1.0 /
                            sqrt(squared_deviations / static_cast<double>(C) + kLayernormEps));
}

DSL_HOST_DEVICE inline float layernorm_output(float x, float mean, float rstd, float weight,
                                              float bias) {
  return (x - mean) * rstd * weight + bias;
}

// The input gradient of one element, from its normalised value and upstream
// gradient through the weight (dnorm), and the row's means of dnorm and of
// dnorm·norm.
DSL_HOST_DEVICE inline float layernorm_input_gradient(float dnorm, float norm, float dnorm_mean,
                                                      float dnorm_norm_mean, float rstd) {
  return (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
}

}  // namespace dslaunch::kernels::math
