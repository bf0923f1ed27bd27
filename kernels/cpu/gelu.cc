#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/math/gelu.h"

namespace dslaunch::kernels::cpu {
namespace {

DSL_VECTOR_CLONES void gelu_chunk(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    out[i] = math::gelu(inp[i]);
  }
}

DSL_VECTOR_CLONES void gelu_backward_chunk(float* dinp, const float* inp, const float* dout,
                                           int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    dinp[i] += math::gelu_derivative(inp[i]) * dout[i];
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
