#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {
namespace {

// probs[0, V) = softmax(logits[0, V)), probs[V, Vp) = 0. probs may be logits.
DSL_VECTOR_CLONES void softmax_row(float* probs, const float* logits, int64_t V, int64_t Vp) {
  float max = logits[0];
#pragma omp simd reduction(max : max)
  for (int64_t i = 0; i < V; ++i) max = logits[i] > max ? logits[i] : max;
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < V; ++i) {
    const float e = expf(logits[i] - max);
    probs[i] = e;
    sum += e;
  }
  const auto inverse = static_cast<float>(1.0 / sum);
#pragma omp simd
  for (int64_t i = 0; i < V; ++i) probs[i] *= inverse;
  std::fill(probs + V, probs + Vp, 0.0f);
}

DSL_VECTOR_CLONES void add_scaled(float* dst, const float* src, float factor, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i] * factor;
}

}  // namespace

void softmax_forward(float* probs, const float* logits, int64_t N, int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) softmax_row(probs + row * Vp, logits + row * Vp, V, Vp);
}

void crossentropy_forward(float* losses, const float* probs, const int32_t* targets, int64_t N,
                          int64_t Vp) {
  for (int64_t row = 0; row < N; ++row) losses[row] = -std::log(probs[row * Vp + targets[row]]);
}

void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) {
    float* d = dlogits + row * Vp;
    const float* p = probs + row * Vp;
    const int64_t target = targets[row];
    const float before = d[target];
    add_scaled(d, p, dlosses[row], V);
    // The target's own term, (p - 1)·dloss, rounded as one expression.
    d[target] = before + (p[target] - 1.0f) * dlosses[row];
  }
}

}  // namespace dslaunch::kernels::cpu
