#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "core/layout/parameter_table.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"

namespace dslaunch::worker::model {

// GPT-2 decoding with a key/value cache: the math of Gpt2Model's forward pass
// (token and position embeddings, pre-LayerNorm blocks with causal
// self-attention and a GELU MLP, ln_f, the output layer tied to the token
// embedding), but each append() runs only the new tokens, whose queries
// attend to the keys and values that earlier calls left in the cache.
//
// GPT-2's positions are absolute (a learned embedding of max_seq_len rows),
// so the context holds at most max_seq_len tokens and cannot slide: a token
// past it would need a position the model has no embedding for, and
// shifting the window would change every cached key. A full generator
// refuses more tokens; reset() starts an empty context.
//
// The table must hold the whole model (no tensor or pipeline split). The
// backend and params (table.total() floats laid out by the table, in the
// backend's memory) belong to the caller and must outlive the generator,
// which owns its cache and working buffers. Not thread-safe; the backend is
// used from the calling thread.
class Gpt2Generator {
 public:
  // New tokens run through the model `chunk` at a time (a long prompt in
  // several passes), which bounds the working buffers to (chunk, 4C) and
  // (chunk, Vp) floats whatever the prompt's length. Throws
  // std::invalid_argument for a split table or a chunk below 1.
  Gpt2Generator(const core::ParameterTable& table, kernels::Backend& backend, const float* params,
                int64_t chunk = 64);

  enum class Logits {
    kLast,   // the last new position's row: what sampling needs
    kEvery,  // every new position's row, for tests and scoring
  };

  // Runs `tokens` at positions [length(), length() + n) and returns their
  // logits in host memory, row-major (rows, Vp): one row with kLast, n with
  // kEvery. Columns [V, Vp) are the padded vocabulary's, which are not
  // tokens (TokenSampler never draws them). Throws std::invalid_argument,
  // leaving the context unchanged, when tokens is empty, holds an id outside
  // [0, V), or would take the context past capacity().
  std::vector<float> append(std::span<const int32_t> tokens, Logits which = Logits::kLast);

  // Tokens in the context so far, and the most it can hold (max_seq_len).
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  // The model's shape: vocab_size real tokens in rows of padded_vocab_size logits.
  const core::Gpt2Config& config() const { return table_.config(); }
  // Empties the context; the cache is overwritten as new tokens arrive.
  void reset() { length_ = 0; }

 private:
  // Runs n <= chunk_ tokens at positions [length_, length_ + n): leaves the
  // residual stream's output (n, C) in residual_.
  void run_chunk(const int32_t* tokens, int64_t n);
  // Causal attention of the chunk's n queries (in qkv_host_) over cache
  // positions [0, length_ + n) of layer `layer`, after storing the chunk's
  // keys and values there; writes atty_host_ (n, C).
  void attend(int layer, int64_t n);

  const core::ParameterTable& table_;
  kernels::Backend& backend_;
  const float* params_;
  int64_t chunk_;
  int64_t capacity_;
  int64_t length_ = 0;

  // Working buffers for one chunk, in the backend's memory.
  kernels::DeviceBuffer<int32_t> tokens_;   // (chunk)
  kernels::DeviceBuffer<float> residual_;   // (chunk, C): the residual stream
  kernels::DeviceBuffer<float> residual2_;  // (chunk, C): after the attention branch
  kernels::DeviceBuffer<float> ln_;         // (chunk, C): a LayerNorm's output
  kernels::DeviceBuffer<float> ln_mean_;    // (chunk)
  kernels::DeviceBuffer<float> ln_rstd_;    // (chunk)
  kernels::DeviceBuffer<float> qkv_;        // (chunk, 3C)
  kernels::DeviceBuffer<float> atty_;       // (chunk, C)
  kernels::DeviceBuffer<float> branch_;     // (chunk, C): a projection's output
  kernels::DeviceBuffer<float> fch_;        // (chunk, 4C)
  kernels::DeviceBuffer<float> logits_;     // (chunk, Vp)

  // In host memory, where the attention loop reads and writes them.
  std::vector<float> key_cache_;    // (L, maxT, C)
  std::vector<float> value_cache_;  // (L, maxT, C)
  std::vector<float> qkv_host_;     // (chunk, 3C)
  std::vector<float> atty_host_;    // (chunk, C)
  std::vector<float> scores_;       // (maxT): one query's attention row
};

// The seed sampling uses when none is given, so that runs are reproducible.
inline constexpr uint64_t kDefaultSamplingSeed = 1337;

// How the next token is drawn from a position's logits.
struct SamplingOptions {
  // 0: greedy, the largest logit (ties to the lowest id), with no random
  // draw; above 0: a draw from softmax(logits / temperature).
  double temperature = 1.0;
  // Above 0: draw only among the top_k largest logits (ties to the lower
  // ids); 0: among every token.
  int64_t top_k = 0;
  uint64_t seed = kDefaultSamplingSeed;
};

// Draws token ids from logits. The same options and logits give the same
// ids on every machine and standard library: std::mt19937_64's sequence is
// fixed by the C++ standard, and the draw uses its raw output (the
// standard distributions' algorithms are the library's choice). Not
// thread-safe.
class TokenSampler {
 public:
  // Throws std::invalid_argument for a negative or non-finite temperature,
  // or a negative top_k.
  explicit TokenSampler(const SamplingOptions& options);

  // A token in [0, vocab_size) chosen from `logits`, one position's row of
  // at least vocab_size floats; columns past vocab_size (a padded
  // vocabulary's) are never chosen.
  int32_t next(std::span<const float> logits, int64_t vocab_size);

 private:
  SamplingOptions options_;
  std::mt19937_64 engine_;
  std::vector<int32_t> candidates_;  // reused between calls
  std::vector<double> weights_;
};

// Called with each token as it is drawn.
using TokenCallback = std::function<void(int32_t token)>;

// Runs `prompt` through `generator` from an empty context (reset() first),
// then draws up to `max_new` tokens, each fed back in before the next is
// drawn, calling on_token (may be empty) as each is drawn. Prompt and drawn tokens together
// never exceed generator.capacity(): generation stops there, returning fewer
// than max_new. Returns the drawn tokens. Throws std::invalid_argument for
// an empty prompt, one of capacity() tokens or more (no room to draw), or
// a negative max_new.
std::vector<int32_t> generate(Gpt2Generator& generator, TokenSampler& sampler,
                              std::span<const int32_t> prompt, int64_t max_new,
                              const TokenCallback& on_token);

}  // namespace dslaunch::worker::model
