#include "worker/data/blended_sampler.h"

#include <cmath>

#include <fmt/format.h>

namespace dslaunch::worker::data {

BlendedSamplerResult BlendedSampler::create(const std::vector<TokenRange>& ranges,
                                            const std::vector<double>& weights, int64_t seq_len,
                                            uint64_t seed) {
  if (ranges.empty() || ranges.size() != weights.size()) {
    return {std::nullopt, "a blend needs one weight for each of its datasets"};
  }
  std::vector<WindowSampler> samplers;
  double total = 0;
  for (size_t d = 0; d < ranges.size(); ++d) {
    if (!(weights[d] > 0) || !std::isfinite(weights[d])) {
      return {std::nullopt, fmt::format("dataset {}'s weight {} is not positive", d, weights[d])};
    }
    total += weights[d];
    // Each dataset its own order: the first keeps the job's seed, so a
    // blend of one draws exactly what the plain sampler draws.
    WindowSamplerResult made = WindowSampler::create(ranges[d], seq_len, seed + d);
    if (!made.sampler) return {std::nullopt, std::move(made.error)};
    samplers.push_back(std::move(*made.sampler));
  }
  std::vector<double> normalised;
  for (const double weight : weights) normalised.push_back(weight / total);
  return {BlendedSampler(std::move(samplers), std::move(normalised)), ""};
}

BlendedSampler::BlendedSampler(std::vector<WindowSampler> samplers, std::vector<double> weights)
    : samplers_(std::move(samplers)), weights_(std::move(weights)), taken_(weights_.size(), 0) {}

BlendedSampler::BlendedSampler(BlendedSampler&& other) noexcept
    : samplers_(std::move(other.samplers_)),
      weights_(std::move(other.weights_)),
      next_(other.next_),
      taken_(std::move(other.taken_)) {}

std::pair<int, int64_t> BlendedSampler::locate(int64_t g) const {
  if (samplers_.size() == 1) return {0, g};
  std::lock_guard<std::mutex> lock(mutex_);
  if (g < next_) {
    next_ = 0;
    std::fill(taken_.begin(), taken_.end(), 0);
  }
  for (;; ++next_) {
    const double scaled = std::max(static_cast<double>(next_), 1.0);
    int behind = 0;
    double most = weights_[0] * scaled - static_cast<double>(taken_[0]);
    for (size_t d = 1; d < weights_.size(); ++d) {
      const double error = weights_[d] * scaled - static_cast<double>(taken_[d]);
      if (error > most) {
        most = error;
        behind = static_cast<int>(d);
      }
    }
    if (next_ == g) return {behind, taken_[behind]};
    ++taken_[behind];
  }
}

void BlendedSampler::sample(int64_t g, int32_t* inputs, int32_t* targets) const {
  const auto [dataset, index] = locate(g);
  samplers_[dataset].sample(index, inputs, targets);
}

}  // namespace dslaunch::worker::data
