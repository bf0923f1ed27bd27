#pragma once

// The one row softmax attention and the output layer share.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {

// What the normaliser of a row softmax was: logsumexp = max + log(sum).
struct SoftmaxNormaliser {
  float max = 0;
  double sum = 0;  // Σ exp(x - max) >= 1: the maximum contributes 1
};

// out[0, n) = softmax(in[0, n)), out[n, width) = 0; out may be in. Inline so
// that each caller's vector clone gets its own vector copy of the loops.
inline SoftmaxNormaliser softmax_row(float* out, const float* in, int64_t n, int64_t width) {
  float max = in[0];
#pragma omp simd reduction(max : max)
  for (int64_t j = 0; j < n; ++j) max = in[j] > max ? in[j] : max;
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float e = expf(in[j] - max);
    out[j] = e;
    sum += e;
  }
  const auto inverse = static_cast<float>(1.0 / sum);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] *= inverse;
  std::fill(out + n, out + width, 0.0f);
  return {max, sum};
}

}  // namespace dslaunch::kernels::cpu
