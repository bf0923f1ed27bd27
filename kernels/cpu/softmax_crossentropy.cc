#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/math/cross_entropy.h"

namespace dslaunch::kernels::cpu {
namespace {

// probs[0, V) = softmax(logits[0, V)), probs[V, Vp) = 0; returns the loss
// logsumexp(logits[0, V)) - logits[target]. probs may be logits: the target's
// logit is read before anything is written.
DSL_VECTOR_CLONES float softmax_crossentropy_row(float* probs, const float* logits, int64_t target,
                                                 int64_t V, int64_t Vp) {
  const float target_logit = logits[target];
  const SoftmaxNormaliser normaliser = softmax_row(probs, logits, V, Vp);
  return math::crossentropy_loss(normaliser.max, target_logit, normaliser.sum);
}

DSL_VECTOR_CLONES void add_scaled(float* dst, const float* src, float factor, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i] * factor;
}

}  // namespace

void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) {
    losses[row] =
        softmax_crossentropy_row(probs + row * Vp, logits + row * Vp, targets[row], V, Vp);
  }
}

void vocab_parallel_max(float* row_max, const float* logits, int64_t N, int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) {
    const float* x = logits + row * Vp;
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < V; ++j) max = x[j] > max ? x[j] : max;
    row_max[row] = max;
  }
}

void vocab_parallel_sums(float* sums, const float* logits, const float* row_max,
                         const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t V,
                         int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) {
    const float* x = logits + row * Vp;
    const float max = row_max[row];
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += expf(x[j] - max);
    sums[row] = static_cast<float>(sum);
    const int64_t target = int64_t{targets[row]} - vocab_begin;
    sums[N + row] = target >= 0 && target < V ? x[target] : 0.0f;
  }
}

void vocab_parallel_softmax_loss(float* probs, float* losses, const float* logits,
                                 const float* row_max, const float* sums, int64_t N, int64_t V,
                                 int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) {
    const float* x = logits + row * Vp;
    float* p = probs + row * Vp;
    const float max = row_max[row];
    const auto inverse = static_cast<float>(1.0 / double{sums[row]});
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) p[j] = expf(x[j] - max) * inverse;
    std::fill(p + V, p + Vp, 0.0f);
    losses[row] = math::crossentropy_loss(max, sums[N + row], sums[row]);
  }
}

void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int32_t* targets, int64_t vocab_begin, int64_t N,
                                   int64_t V, int64_t Vp) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) {
    float* d = dlogits + row * Vp;
    const float* p = probs + row * Vp;
    const int64_t target = int64_t{targets[row]} - vocab_begin;
    if (target < 0 || target >= V) {
      add_scaled(d, p, dlosses[row], V);
      continue;
    }
    const float before = d[target];
    add_scaled(d, p, dlosses[row], V);
    // The target's own term, rounded as one expression.
    d[target] = before + math::crossentropy_logit_gradient(p[target], true, dlosses[row]);
  }
}

}  // namespace dslaunch::kernels::cpu
