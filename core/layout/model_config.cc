#include "core/layout/model_config.h"

namespace dslaunch::core {

core::Gpt2Config model_config(const spec::ModelSpec& model, int tensor_parallel) {
  core::Gpt2Config config;
  config.num_layers = model.num_layers;
  config.channels = model.hidden_size;
  config.num_heads = model.num_attention_heads;
  config.vocab_size = model.vocab_size;
  config.padded_vocab_size = core::padded_vocab(
      model.vocab_size, static_cast<int64_t>(model.make_vocab_size_divisible_by) * tensor_parallel);
  config.max_seq_len =
      model.max_position_embeddings > 0 ? model.max_position_embeddings : model.seq_length;
  return config;
}

}  // namespace dslaunch::core
