#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// One parameter tensor inside the flat parameter buffer.
struct TensorInfo {
  std::string name;            // Hugging Face GPT-2 name, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // linear weights in Conv1D layout, (in, out)
  int64_t offset = 0;          // in floats, from the start of the buffer
  int64_t numel = 0;
  bool weight_decay = false;  // matrices and embeddings decay; biases and norms do not
  int layer = -1;             // transformer block, or -1 for embeddings and ln_f
};

// The one table that describes the flat parameter buffer (and the gradient
// and optimizer-state buffers, which share its layout). Order: wte, wpe, then
// every block's tensors contiguously (ln_1, attn.c_attn, attn.c_proj, ln_2,
// mlp.c_fc, mlp.c_proj), then ln_f: a block is one contiguous range, which is
// what bucketed gradient reduction and per-layer gathering work on.
class ParameterTable {
 public:
  explicit ParameterTable(const Gpt2Config& config);

  const Gpt2Config& config() const { return config_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }  // floats in the whole buffer

  // nullptr if no tensor has that name.
  const TensorInfo* find(const std::string& name) const;
  // The index in tensors() of a tensor by name; throws std::out_of_range.
  const TensorInfo& at(const std::string& name) const;
  // [begin, end) in floats of block `layer`'s tensors.
  std::pair<int64_t, int64_t> layer_range(int layer) const;

 private:
  Gpt2Config config_;
  std::vector<TensorInfo> tensors_;
  int64_t total_ = 0;
};

}  // namespace dslaunch::core
