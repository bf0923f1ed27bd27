#pragma once

// The softmax and cross-entropy of the output layer as kernels (see
// elementwise_kernels.h for the form): one block per row, whole-vocabulary
// or in the three vocabulary-parallel steps (kernels/backend.h).

#include <math.h>

#include <cstdint>

#include "kernels/math/cross_entropy.h"
#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

// The maximum of x[0, n) over the block (-inf for n = 0).
template <class Thread>
DSL_HOST_DEVICE float block_row_max(Thread& t, const float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t j = t.thread_index(); j < n; j += t.block_size()) max = x[j] > max ? x[j] : max;
  return block_reduce(t, max, t.template shared_memory<float>(), Max<float>{});
}

// Σ exp(x[j] - max) over x[0, n), in double, over the block.
template <class Thread>
DSL_HOST_DEVICE double block_row_exp_sum(Thread& t, const float* x, int64_t n, float max) {
  double sum = 0;
  for (int64_t j = t.thread_index(); j < n; j += t.block_size()) sum += expf(x[j] - max);
  return block_reduce(t, sum, t.template shared_memory<double>(), Sum<double>{});
}

// p[0, n) = exp(x - max) · inverse, p[n, width) = 0.
template <class Thread>
DSL_HOST_DEVICE void block_write_probs(Thread& t, float* p, const float* x, int64_t n,
                                       int64_t width, float max, float inverse) {
  for (int64_t j = t.thread_index(); j < width; j += t.block_size()) {
    p[j] = j < n ? expf(x[j] - max) * inverse : 0.0f;
  }
}

struct SoftmaxCrossentropyForward {
  float* probs;
  float* losses;
  const float* logits;
  const int32_t* targets;
  int64_t N;
  int64_t V;
  int64_t Vp;

  LaunchShape shape() const { return block_per_row_shape<double>(N); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = t.block_index();
    const float* x = logits + row * Vp;
    // Read before the first barrier, so before any thread overwrites it
    // (probs may be logits).
    const float target_logit = x[targets[row]];
    const float max = block_row_max(t, x, V);
    const double sum = block_row_exp_sum(t, x, V, max);
    block_write_probs(t, probs + row * Vp, x, V, Vp, max, static_cast<float>(1.0 / sum));
    if (t.thread_index() == 0) losses[row] = math::crossentropy_loss(max, target_logit, sum);
  }
};

struct VocabParallelMax {
  float* row_max;
  const float* logits;
  int64_t N;
  int64_t V;
  int64_t Vp;

  LaunchShape shape() const { return block_per_row_shape<float>(N); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = t.block_index();
    const float max = block_row_max(t, logits + row * Vp, V);
    if (t.thread_index() == 0) row_max[row] = max;
  }
};

struct VocabParallelSums {
  float* sums;
  const float* logits;
  const float* row_max;
  const int32_t* targets;
  int64_t vocab_begin;
  int64_t N;
  int64_t V;
  int64_t Vp;

  LaunchShape shape() const { return block_per_row_shape<double>(N); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = t.block_index();
    const float* x = logits + row * Vp;
    const double sum = block_row_exp_sum(t, x, V, row_max[row]);
    if (t.thread_index() != 0) return;
    sums[row] = static_cast<float>(sum);
    const int64_t target = static_cast<int64_t>(targets[row]) - vocab_begin;
    sums[N + row] = target >= 0 && target < V ? x[target] : 0.0f;
  }
};

struct VocabParallelSoftmaxLoss {
  float* probs;
  float* losses;
  const float* logits;
  const float* row_max;
  const float* sums;
  int64_t N;
  int64_t V;
  int64_t Vp;

  LaunchShape shape() const { return block_per_row_shape<float>(N); }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t row = t.block_index();
    const float max = row_max[row];
    const auto inverse = static_cast<float>(1.0 / static_cast<double>(sums[row]));
    block_write_probs(t, probs + row * Vp, logits + row * Vp, V, Vp, max, inverse);
    if (t.thread_index() == 0) losses[row] = math::crossentropy_loss(max, sums[N + row], sums[row]);
  }
};

}  // namespace dslaunch::kernels::simt
