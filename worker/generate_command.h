#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/model/gpt2_generator.h"

namespace dslaunch::worker {

struct GenerateOptions {
  // GPT-2 safetensors (ours or another tool's), or a folder holding
  // weights/model.safetensors (a job directory) or model.safetensors.
  std::string weights;
  // Text, encoded as bytes (a byte-level model) or by the tokenizer.
  std::optional<std::string> prompt;
  // Token ids, for any vocabulary; excludes `prompt`.
  std::vector<int32_t> prompt_tokens;
  // A GPT-2 BPE tokenizer: Hugging Face's tokenizer.json, or OpenAI's
  // vocab.json with merges.txt. Default: those files beside the weights.
  std::string tokenizer_json;
  std::string vocab, merges;
  std::optional<int64_t> tokens;  // new tokens; default: until the context is full
  model::SamplingOptions sampling;
  int64_t num_heads = 0;  // 0: from a config.json beside the weights
  bool json = false;
  int threads = 0;  // 0: every core
};

// `dsworker generate`, which `dslaunch generate` runs: samples a
// continuation of the prompt from GPT-2 weights, with a KV cache. A
// byte-level model (a vocabulary of at most 256 tokens), or one with a GPT-2
// BPE tokenizer (given, or beside the weights), takes the prompt as text
// (default: a new line, or <|endoftext|>) and prints the prompt and the
// continuation as text, each token as it is drawn, then a newline; any model
// takes --prompt-tokens, and one with no tokenizer prints token ids the same
// way. The prompt and the continuation never exceed the model's seq_length:
// a longer request stops there, with a note on stderr. With --json, only
// `{"tokens": [prompt, then continuation], "prompt_length": P, "text": ...}`
// when done (text null without a tokenizer; bytes that are not UTF-8 become
// U+FFFD). Returns 0, 1 (failed), 2 (bad input).
int run_generate_command(const GenerateOptions& options);

}  // namespace dslaunch::worker
