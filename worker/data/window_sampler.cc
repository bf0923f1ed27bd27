#include "worker/data/window_sampler.h"

#include <fmt/format.h>

#include "worker/data/feistel_permutation.h"

namespace dslaunch::worker::data {

int64_t window_count(int64_t tokens, int64_t seq_len) {
  return tokens < seq_len + 1 ? 0 : (tokens - 1) / seq_len;
}

int64_t global_sample_index(const SampleSlot& slot) {
  return slot.samples_before + (slot.micro_step * slot.dp_size + slot.dp_rank) * slot.micro_batch +
         slot.row;
}

WindowSamplerResult WindowSampler::create(TokenRange range, int64_t seq_len, uint64_t seed) {
  if (seq_len < 1) {
    return {std::nullopt, fmt::format("sequence length {} must be 1 or more", seq_len)};
  }
  if (window_count(range.size(), seq_len) < 1) {
    return {std::nullopt,
            fmt::format("{} tokens of {} are fewer than one training window of seq_length + 1 = "
                        "{} tokens",
                        range.size(), range.source->describe(), seq_len + 1)};
  }
  return {WindowSampler(range, seq_len, seed), ""};
}

WindowSampler::WindowSampler(TokenRange range, int64_t seq_len, uint64_t seed)
    : range_(range),
      seq_len_(seq_len),
      seed_(seed),
      windows_(window_count(range.size(), seq_len)) {}

int64_t WindowSampler::window_of(int64_t g) const {
  const uint64_t epoch = static_cast<uint64_t>(g / windows_);
  const FeistelPermutation order(static_cast<uint64_t>(windows_), mix64(mix64(seed_) + epoch));
  return static_cast<int64_t>(order(static_cast<uint64_t>(g % windows_)));
}

void WindowSampler::sample(int64_t g, int32_t* inputs, int32_t* targets) const {
  const int64_t start = window_of(g) * seq_len_;
  range_.read(start, seq_len_, inputs);
  range_.read(start + 1, seq_len_, targets);
}

}  // namespace dslaunch::worker::data
