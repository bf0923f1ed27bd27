#include "core/layout/gpt2_config.h"

#include <fmt/format.h>

namespace dslaunch::core {

int64_t padded_vocab(int64_t vocab_size, int64_t multiple) {
  if (multiple <= 1) return vocab_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

std::string config_problem(const Gpt2Config& c) {
  const auto out_of_range = [](const char* name, int64_t value, int64_t min, int64_t max) {
    return value < min || value > max
               ? fmt::format("{} is {}; it must be in {}..{}", name, value, min, max)
               : std::string();
  };
  for (std::string problem :
       {out_of_range("num_layers", c.num_layers, 1, kMaxLayers),
        out_of_range("num_heads", c.num_heads, 1, kMaxChannels),
        out_of_range("channels", c.channels, 1, kMaxChannels),
        out_of_range("vocab_size", c.vocab_size, 2, kMaxVocab),
        out_of_range("padded_vocab_size", c.padded_vocab_size, 2, kMaxPaddedVocab),
        out_of_range("max_seq_len", c.max_seq_len, 1, kMaxSeqLen)}) {
    if (!problem.empty()) return problem;
  }
  if (c.channels % c.num_heads != 0) {
    return fmt::format("channels ({}) must be a positive multiple of num_heads ({})", c.channels,
                       c.num_heads);
  }
  if (c.padded_vocab_size < c.vocab_size) {
    return fmt::format("padded_vocab_size ({}) is below vocab_size ({})", c.padded_vocab_size,
                       c.vocab_size);
  }
  return "";
}

}  // namespace dslaunch::core
