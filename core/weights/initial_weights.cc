#include "core/weights/initial_weights.h"

#include <vector>

#include <fmt/format.h>

#include "core/weights/hf_gpt2.h"

namespace dslaunch::core {
namespace {

// What `loaded` has where `model` differs, as "4 layers (the model has 12),
// ..."; "" when the shapes agree.
std::string differences(const Gpt2Config& loaded, const Gpt2Config& model) {
  struct Size {
    const char* what;
    const char* key;
    int64_t loaded, model;
  };
  const Size sizes[] = {
      {"layers", "model.num_layers", loaded.num_layers, model.num_layers},
      {"channels", "model.hidden_size", loaded.channels, model.channels},
      {"attention heads", "model.num_attention_heads", loaded.num_heads, model.num_heads},
      {"vocabulary entries", "model.vocab_size", loaded.vocab_size, model.vocab_size},
      {"positions", "model.max_position_embeddings", loaded.max_seq_len, model.max_seq_len},
  };
  std::string text;
  for (const Size& size : sizes) {
    if (size.loaded == size.model) continue;
    text += fmt::format("{}{} {} where {} is {}", text.empty() ? "" : ", ", size.loaded, size.what,
                        size.key, size.model);
  }
  return text;
}

// The whole model's sizes at `path`, padded as `model` pads its vocabulary
// (padded_vocab(v, Vp) is Vp for every v <= Vp).
HfGpt2Weights read(const std::string& path, const Gpt2Config& model, bool values) {
  return values ? load_hf_gpt2(path, model.num_heads, model.padded_vocab_size)
                : inspect_hf_gpt2(path, model.num_heads, model.padded_vocab_size);
}

Status check(const HfGpt2Weights& loaded, const std::string& path, const Gpt2Config& model) {
  if (!loaded.error.empty()) return Status(StatusCode::kInvalidArgument, loaded.error);
  if (std::string differ = differences(loaded.config, model); !differ.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("training.init_from: the GPT-2 weights '{}' do not fit the model: {}",
                              path, differ));
  }
  return {};
}

}  // namespace

Status initial_weights_problem(const std::string& path, const Gpt2Config& model) {
  return check(read(path, model, false), path, model);
}

Status load_initial_weights(const std::string& path, const ParameterTable& table, float* params) {
  const HfGpt2Weights loaded = read(path, table.config(), true);
  if (Status status = check(loaded, path, table.config()); !status.ok()) return status;
  const ParameterTable whole(loaded.config);
  for (const TensorInfo& tensor : table.tensors()) {
    const TensorInfo& source = whole.at(tensor.name);
    copy_out_of_global(tensor, loaded.params.data() + source.offset, params + tensor.offset,
                       sizeof(float));
  }
  return {};
}

}  // namespace dslaunch::core
