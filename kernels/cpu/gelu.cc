#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {
namespace {

// GELU's tanh approximation: 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

DSL_VECTOR_CLONES void gelu_chunk(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kCubic * x * x * x)));
  }
}

DSL_VECTOR_CLONES void gelu_backward_chunk(float* dinp, const float* inp, const float* dout,
                                           int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float tanh_u = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    const float grad = 0.5f * (1.0f + tanh_u) + 0.5f * x * (1.0f - tanh_u * tanh_u) * du_dx;
    dinp[i] += grad * dout[i];
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  for_each_chunk(
      n, [&](int64_t begin, int64_t end) { gelu_chunk(out + begin, inp + begin, end - begin); });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  for_each_chunk(n, [&](int64_t begin, int64_t end) {
    gelu_backward_chunk(dinp + begin, inp + begin, dout + begin, end - begin);
  });
}

}  // namespace dslaunch::kernels::cpu
