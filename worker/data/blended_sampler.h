#pragma once

// Training samples drawn from several datasets by weight, as Megatron's
// BlendedDataset draws them: global sample g goes to the dataset furthest
// behind its share, the dataset d maximising weight_d · max(g, 1) − n_d
// (the lowest such d on a tie), where n_d counts the samples d took before
// g; it is that dataset's sample n_d, a window of its own WindowSampler
// (its own permutation, epochs and seed). With one dataset, sample g is its
// sample g: a blend of one is the plain sampler.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "worker/data/window_sampler.h"

namespace dslaunch::worker::data {

struct BlendedSamplerResult;

// Thread-safe. The datasets' sources must outlive it.
class BlendedSampler {
 public:
  // One range per dataset and its weight (any positive scale: normalised
  // here). Fails when a range holds no window or a weight is not positive.
  static BlendedSamplerResult create(const std::vector<TokenRange>& ranges,
                                     const std::vector<double>& weights, int64_t seq_len,
                                     uint64_t seed);

  BlendedSampler(BlendedSampler&& other) noexcept;

  // The dataset global sample g is drawn from, and its index there.
  // Precondition: g >= 0. Samples are found in order from the last one
  // asked for (the trainer asks in increasing order), else from 0.
  std::pair<int, int64_t> locate(int64_t g) const;

  // Writes sample g's inputs and targets, seq_len tokens each.
  void sample(int64_t g, int32_t* inputs, int32_t* targets) const;

 private:
  BlendedSampler(std::vector<WindowSampler> samplers, std::vector<double> weights);

  std::vector<WindowSampler> samplers_;
  std::vector<double> weights_;  // summing to 1
  // Where the assignment walk stands: the next sample and each dataset's
  // count before it. Guarded by mutex_.
  mutable std::mutex mutex_;
  mutable int64_t next_ = 0;
  mutable std::vector<int64_t> taken_;
};

struct BlendedSamplerResult {
  std::optional<BlendedSampler> sampler;  // empty when error is set
  std::string error;
};

}  // namespace dslaunch::worker::data
