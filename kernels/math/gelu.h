#pragma once

// GELU's tanh approximation, 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))),
// and its derivative: the per-element math of the CPU backend's GELU loops
// and of the CUDA kernels.

#include <math.h>

#include "kernels/simt/host_device.h"

namespace dslaunch::kernels::math {

inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kGeluCubic = 0.044715f;

DSL_HOST_DEVICE inline float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

// d gelu(x) / dx.
DSL_HOST_DEVICE inline float gelu_derivative(float x) {
  const float tanh_u = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float du_dx = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + tanh_u) + 0.5f * x * (1.0f - tanh_u * tanh_u) * du_dx;
}

}  // namespace dslaunch::kernels::math
