#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::core {

// GPT-2's shape. The token embedding has padded_vocab_size rows (a multiple
// that keeps matrix products aligned and, later, splits evenly across tensor
// ranks); only the first vocab_size are real tokens.
struct Gpt2Config {
  int64_t num_layers = 12;            // L
  int64_t channels = 768;             // C
  int64_t num_heads = 12;             // NH
  int64_t vocab_size = 50257;         // V
  int64_t padded_vocab_size = 50304;  // Vp
  int64_t max_seq_len = 1024;         // maxT, rows of the position embedding
};

// vocab_size rounded up to a multiple of `multiple` (Megatron's
// make-vocab-size-divisible-by times the tensor-parallel size).
int64_t padded_vocab(int64_t vocab_size, int64_t multiple);

// The largest shape dslaunch accepts, far above any trained GPT: the
// parameter count (about 12·L·C² + Vp·C + maxT·C) and its byte counts stay
// inside 64 bits. Shapes from files (manifests, safetensors) are held to
// these before anything is sized from them.
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxChannels = 1 << 20;
inline constexpr int64_t kMaxVocab = 1 << 24;
inline constexpr int64_t kMaxPaddedVocab = 1 << 25;
inline constexpr int64_t kMaxSeqLen = 1 << 24;

// "" when the shape is usable, otherwise what is wrong with it (for example
// channels not divisible by num_heads, or a size past the bounds above).
std::string config_problem(const Gpt2Config& config);

}  // namespace dslaunch::core
