#include "core/layout/gpt2_config.h"

#include <stdexcept>

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

ParameterTable::ParameterTable(const Gpt2Config& config) : config_(config) {
  const int64_t C = config.channels;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, int layer) {
    int64_t numel = 1;
    for (const int64_t d : shape) numel *= d;
    tensors_.push_back({std::move(name), std::move(shape), total_, numel, decay, layer});
    total_ += numel;
  };
  add("transformer.wte.weight", {config.padded_vocab_size, C}, true, -1);
  add("transformer.wpe.weight", {config.max_seq_len, C}, true, -1);
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string p = fmt::format("transformer.h.{}.", l);
    add(p + "ln_1.weight", {C}, false, l);
    add(p + "ln_1.bias", {C}, false, l);
    add(p + "attn.c_attn.weight", {C, 3 * C}, true, l);
    add(p + "attn.c_attn.bias", {3 * C}, false, l);
    add(p + "attn.c_proj.weight", {C, C}, true, l);
    add(p + "attn.c_proj.bias", {C}, false, l);
    add(p + "ln_2.weight", {C}, false, l);
    add(p + "ln_2.bias", {C}, false, l);
    add(p + "mlp.c_fc.weight", {C, 4 * C}, true, l);
    add(p + "mlp.c_fc.bias", {4 * C}, false, l);
    add(p + "mlp.c_proj.weight", {4 * C, C}, true, l);
    add(p + "mlp.c_proj.bias", {C}, false, l);
  }
  add("transformer.ln_f.weight", {C}, false, -1);
  add("transformer.ln_f.bias", {C}, false, -1);
}

const TensorInfo* ParameterTable::find(const std::string& name) const {
  for (const TensorInfo& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

const TensorInfo& ParameterTable::at(const std::string& name) const {
  if (const TensorInfo* tensor = find(name)) return *tensor;
  throw std::out_of_range("no parameter tensor named " + name);
}

std::pair<int64_t, int64_t> ParameterTable::layer_range(int layer) const {
  int64_t begin = -1;
  int64_t end = -1;
  for (const TensorInfo& tensor : tensors_) {
    if (tensor.layer != layer) continue;
    if (begin < 0) begin = tensor.offset;
    end = tensor.offset + tensor.numel;
  }
  if (begin < 0) throw std::out_of_range(fmt::format("no block {}", layer));
  return {begin, end};
}

}  // namespace dslaunch::core
