#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"

namespace dslaunch::core {

// Hugging Face GPT-2 interop: weights as a safetensors file with
// GPT2LMHeadModel's tensor names and Conv1D (in, out) layout, which is also
// the ParameterTable's, plus a config.json with GPT2Config's keys.

// Writes `safetensors_path` (fp32, every tensor of `table` under its
// Hugging Face name, the token embedding cut to its vocab_size real rows,
// metadata {"format": "pt"} as transformers writes it; no lm_head.weight,
// which is tied to transformer.wte.weight) and `config.json` in the same
// folder, each atomically (see write_safetensors). `params` holds
// table.total() floats. transformers' from_pretrained(folder) wants the
// weights named model.safetensors. Returns false with `error` naming the
// file on failure.
bool write_hf_gpt2(const std::string& safetensors_path, const ParameterTable& table,
                   const float* params, std::string& error);
// The same from parameters that are not in memory whole: read(begin, end,
// out) puts floats [begin, end) of the table's layout in out and returns ""
// or what failed; it is asked for each tensor's floats in pieces (of at
// most kSafetensorsSourcePiece bytes), and a failure leaves the old file.
// Every piece is asked for once, whatever fails, so `read` may be
// collective: the other ranks of its group call read_hf_gpt2_sources() with
// it meanwhile, which makes the same calls and writes nothing ("" or the
// first failed read).
using ParameterReader = std::function<std::string(int64_t begin, int64_t end, float* out)>;
bool write_hf_gpt2(const std::string& safetensors_path, const ParameterTable& table,
                   const ParameterReader& read, std::string& error);
std::string read_hf_gpt2_sources(const ParameterTable& table, const ParameterReader& read);

// The config.json text write_hf_gpt2 writes for `config`: the keys of the
// released GPT-2 checkpoints' config.json (model_type "gpt2", activation
// "gelu_new", layer_norm_epsilon 1e-5, tied embeddings, ...) with this
// model's sizes, and no dropout, since dslaunch trains without it.
std::string hf_gpt2_config_json(const Gpt2Config& config);

struct HfGpt2Weights {
  Gpt2Config config;
  std::vector<float> params;  // laid out by ParameterTable(config); empty on error
  std::string error;          // empty on success; names the file and the problem
};

// Loads GPT-2 weights from a safetensors file written by write_hf_gpt2 or by
// other tools (transformers' save_pretrained, the released checkpoints):
// names with or without the "transformer." prefix; F32, F16, BF16 or F64;
// the causal-mask buffers older checkpoints store (h.<i>.attn.bias,
// h.<i>.attn.masked_bias) skipped; an lm_head.weight accepted only when it
// equals the token embedding (the model's output layer is tied to it).
// Infers num_layers from the h.<i> blocks, channels and vocab_size from the
// token embedding, max_seq_len from the position embedding, and pads the
// embedding with zero rows to padded_vocab(vocab_size,
// padded_vocab_multiple). The weights do not record the number of heads:
// `num_heads` gives it, or, when 0, the n_head of a config.json beside the
// file; when both exist they must agree, as must that config.json's n_embd,
// n_layer, vocab_size and n_positions with the weights. A missing tensor, a
// wrong shape, a tensor GPT-2 has no place for or a non-float dtype is an
// error naming the tensor.
HfGpt2Weights load_hf_gpt2(const std::string& safetensors_path, int64_t num_heads,
                           int64_t padded_vocab_multiple);

// load_hf_gpt2's checks of the header and config.json and its config,
// without reading the values (params stays empty; an lm_head.weight is not
// compared with the token embedding): whether the weights fit a model,
// before anything starts.
HfGpt2Weights inspect_hf_gpt2(const std::string& safetensors_path, int64_t num_heads,
                              int64_t padded_vocab_multiple);

}  // namespace dslaunch::core
