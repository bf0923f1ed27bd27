#pragma once

// Deterministic, resumable sampling of training windows. A range of N tokens
// holds W = (N - 1) / T non-overlapping windows of T + 1 tokens: window w is
// tokens [w·T, w·T + T + 1), its first T tokens the inputs and its last T the
// targets (the inputs shifted by one). Global sample g is window
// perm_epoch(g mod W) of epoch g / W, where perm_epoch is a pseudo-random
// permutation of [0, W) keyed by (seed, epoch) (see FeistelPermutation):
// every epoch visits each window once, in a fresh order. The sampler has no
// state beyond its arguments, so resuming is continuing from a saved g.

#include <cstdint>
#include <optional>
#include <string>

#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// Windows of seq_len + 1 tokens that start at multiples of seq_len in
// `tokens` tokens: (tokens - 1) / seq_len, or 0 when tokens < seq_len + 1.
int64_t window_count(int64_t tokens, int64_t seq_len);

// Where one sample row sits in a training step.
struct SampleSlot {
  // Samples the run consumed before this step: step · global_batch, unless
  // the global batch changed on a resume (elasticity).
  int64_t samples_before = 0;
  int64_t micro_step = 0;  // 0 .. accumulation steps - 1
  int64_t dp_size = 1;
  int64_t dp_rank = 0;
  int64_t micro_batch = 0;  // rows per micro-batch on one rank
  int64_t row = 0;          // 0 .. micro_batch - 1
};

// g = samples_before + (micro_step·dp_size + dp_rank)·micro_batch + row:
// a step of global batch B uses samples [samples_before, samples_before + B)
// however the batch is split across data-parallel ranks and micro-steps.
int64_t global_sample_index(const SampleSlot& slot);

struct WindowSamplerResult;

// Immutable and thread-safe; reads through a TokenRange whose source must
// outlive it.
class WindowSampler {
 public:
  // Fails when seq_len < 1 or the range holds no window.
  static WindowSamplerResult create(TokenRange range, int64_t seq_len, uint64_t seed);

  int64_t windows() const { return windows_; }
  int64_t seq_len() const { return seq_len_; }

  // The window global sample g reads. Precondition: g >= 0.
  int64_t window_of(int64_t g) const;

  // Writes sample g's inputs and targets, seq_len tokens each.
  // Precondition: g >= 0.
  void sample(int64_t g, int32_t* inputs, int32_t* targets) const;

 private:
  WindowSampler(TokenRange range, int64_t seq_len, uint64_t seed);

  TokenRange range_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t windows_;
};

struct WindowSamplerResult {
  std::optional<WindowSampler> sampler;  // empty when error is set
  std::string error;
};

}  // namespace dslaunch::worker::data
