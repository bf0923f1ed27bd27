#include "core/weights/hf_gpt2.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "core/atomic_file.h"
#include "core/weights/safetensors.h"

namespace dslaunch::core {
namespace {

constexpr std::string_view kPrefix = "transformer.";
constexpr std::string_view kTokenEmbedding = "transformer.wte.weight";
constexpr std::string_view kPositionEmbedding = "transformer.wpe.weight";
// GPT2LMHeadModel's output layer; tied to the token embedding.
constexpr std::string_view kLmHead = "lm_head.weight";

std::string config_json_path(const std::string& safetensors_path) {
  return (std::filesystem::path(safetensors_path).parent_path() / "config.json").string();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The block index of a name "h.<i>.<rest>" (prefix removed), and <rest>.
std::optional<std::pair<int64_t, std::string_view>> block_of(std::string_view name) {
  if (!name.starts_with("h.")) return std::nullopt;
  name.remove_prefix(2);
  int64_t layer = -1;
  const auto [end, status] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (status != std::errc() || end == name.data() || end == name.data() + name.size() ||
      *end != '.') {
    return std::nullopt;
  }
  return std::pair{layer, std::string_view(end + 1, name.data() + name.size() - end - 1)};
}

// The file's tensors under their prefixed Hugging Face names, without the
// ones GPT-2 has no use for.
struct TensorIndex {
  std::map<std::string, const SafetensorsTensor*, std::less<>> by_name;
  const SafetensorsTensor* lm_head = nullptr;
  std::set<int64_t> layers;
};

// "" or what makes the file's names unusable.
std::string index_tensors(const SafetensorsFile& file, TensorIndex& index) {
  for (const SafetensorsTensor& tensor : file.tensors()) {
    if (tensor.name == kLmHead) {
      index.lm_head = &tensor;
      continue;
    }
    std::string_view bare = tensor.name;
    if (bare.starts_with(kPrefix)) bare.remove_prefix(kPrefix.size());
    const auto block = block_of(bare);
    // Causal-mask buffers that older transformers versions saved with the
    // weights; the model rebuilds the mask, so they carry nothing.
    if (block && (block->second == "attn.bias" || block->second == "attn.masked_bias")) continue;
    if (block) index.layers.insert(block->first);
    const std::string name = fmt::format("{}{}", kPrefix, bare);
    if (!index.by_name.emplace(name, &tensor).second) {
      return fmt::format("tensor '{}' is in the file twice, with and without the '{}' prefix", name,
                         kPrefix);
    }
  }
  return "";
}

// A tensor found under `name` with or without the prefix, or nullptr.
const SafetensorsTensor* find(const TensorIndex& index, std::string_view name) {
  const auto found = index.by_name.find(name);
  return found == index.by_name.end() ? nullptr : found->second;
}

std::string missing(std::string_view name) {
  return fmt::format("it has no tensor '{}' (or '{}')", name, name.substr(kPrefix.size()));
}

// Checks config.json's sizes against the ones the weights give and fills in
// num_heads from it when the caller gave none. "" or the problem.
std::string apply_config_json(const std::string& path, Gpt2Config& config) {
  std::ifstream in(path);
  if (!in) return fmt::format("cannot read '{}'", path);
  std::stringstream text;
  text << in.rdbuf();
  std::string parse_error;
  const std::optional<nlohmann::json> parsed = core::parse_untrusted_json(text.str(), parse_error);
  if (!parsed) return fmt::format("'{}' is not valid JSON: {}", path, parse_error);
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) return fmt::format("'{}' is not a JSON object", path);
  const std::pair<const char*, int64_t> sizes[] = {{"n_embd", config.channels},
                                                   {"n_layer", config.num_layers},
                                                   {"vocab_size", config.vocab_size},
                                                   {"n_positions", config.max_seq_len}};
  for (const auto& [key, from_weights] : sizes) {
    const auto value = json.find(key);
    if (value == json.end()) continue;
    if (!value->is_number_integer() || value->get<int64_t>() != from_weights) {
      return fmt::format("'{}' has {} {}, but the weights have {}; it describes another model",
                         path, key, core::json_excerpt(*value), from_weights);
    }
  }
  const auto heads = json.find("n_head");
  if (heads == json.end()) {
    if (config.num_heads == 0) {
      return fmt::format("'{}' has no n_head; give the number of attention heads", path);
    }
    return "";
  }
  if (!heads->is_number_integer() || heads->get<int64_t>() < 1) {
    return fmt::format("'{}' has n_head {}; it must be a positive integer", path, core::json_excerpt(*heads));
  }
  if (config.num_heads != 0 && config.num_heads != heads->get<int64_t>()) {
    return fmt::format("{} attention heads were asked for, but '{}' has n_head {}",
                       config.num_heads, path, heads->get<int64_t>());
  }
  config.num_heads = heads->get<int64_t>();
  return "";
}

// The shape the file must give `info` (the token embedding without its
// padding rows).
std::vector<int64_t> expected_shape(const TensorInfo& info, const Gpt2Config& config) {
  std::vector<int64_t> shape = info.shape;
  if (info.name == kTokenEmbedding) shape[0] = config.vocab_size;
  return shape;
}

std::string wrong_shape(const SafetensorsTensor& tensor, const std::vector<int64_t>& expected,
                        const Gpt2Config& config) {
  std::string problem = fmt::format(
      "tensor '{}' has shape {}, but a GPT-2 with {} channels, {} layers, vocabulary {} and {} "
      "positions needs {}",
      tensor.name, shape_text(tensor.shape), config.channels, config.num_layers, config.vocab_size,
      config.max_seq_len, shape_text(expected));
  if (expected.size() == 2 && tensor.shape == std::vector<int64_t>{expected[1], expected[0]}) {
    problem +=
        "; it looks transposed: GPT-2's Conv1D weights are (in, out), nn.Linear's are (out, in)";
  }
  return problem;
}

}  // namespace

std::string hf_gpt2_config_json(const Gpt2Config& config) {
  // The end-of-text token: 0 for a byte vocabulary (the document separator
  // of tools/tokenize), else the last token, as GPT-2's <|endoftext|> is.
  const int64_t end_of_text = config.vocab_size == 256 ? 0 : config.vocab_size - 1;
  // Keys sorted, two-space indent: as transformers writes config.json.
  const nlohmann::json json = {
      {"activation_function", "gelu_new"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"attn_pdrop", 0.0},
      {"bos_token_id", end_of_text},
      {"embd_pdrop", 0.0},
      {"eos_token_id", end_of_text},
      {"initializer_range", 0.02},
      {"layer_norm_epsilon", 1e-5},
      {"model_type", "gpt2"},
      {"n_ctx", config.max_seq_len},
      {"n_embd", config.channels},
      {"n_head", config.num_heads},
      {"n_inner", nullptr},
      {"n_layer", config.num_layers},
      {"n_positions", config.max_seq_len},
      {"resid_pdrop", 0.0},
      {"summary_activation", nullptr},
      {"summary_first_dropout", 0.0},
      {"summary_proj_to_labels", true},
      {"summary_type", "cls_index"},
      {"summary_use_proj", true},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
      {"use_cache", true},
      {"vocab_size", config.vocab_size},
  };
  return json.dump(2);
}

namespace {

// The file's tensors: from `params` when they are in memory, else from `read`.
std::vector<SafetensorsTensorData> hf_tensors(const ParameterTable& table, const float* params,
                                              const ParameterReader& read) {
  const Gpt2Config& config = table.config();
  std::vector<SafetensorsTensorData> tensors;
  for (const TensorInfo& info : table.tensors()) {
    // The real rows of the embedding are its first vocab_size rows.
    SafetensorsTensorData tensor;
    tensor.name = info.name;
    tensor.shape = expected_shape(info, config);
    if (params != nullptr) {
      tensor.data = params + info.offset;
    } else {
      tensor.source = [&read, offset = info.offset](int64_t at, int64_t bytes, void* out) {
        const int64_t begin = offset + at / static_cast<int64_t>(sizeof(float));
        return read(begin, begin + bytes / static_cast<int64_t>(sizeof(float)),
                    static_cast<float*>(out));
      };
    }
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

bool write_hf_gpt2(const std::string& safetensors_path, const ParameterTable& table,
                   const float* params, const ParameterReader& read, std::string& error) {
  const Gpt2Config& config = table.config();
  if (const std::string problem = config_problem(config); !problem.empty()) {
    error = fmt::format("cannot write '{}': the model's shape is not usable: {}", safetensors_path,
                        problem);
    return false;
  }
  // transformers refuses safetensors whose "format" is not a framework it knows.
  if (!write_safetensors(safetensors_path, hf_tensors(table, params, read), {{"format", "pt"}},
                         error)) {
    return false;
  }
  return core::write_file_atomically(config_json_path(safetensors_path),
                                     hf_gpt2_config_json(config) + "\n", error);
}

}  // namespace

bool write_hf_gpt2(const std::string& safetensors_path, const ParameterTable& table,
                   const float* params, std::string& error) {
  return write_hf_gpt2(safetensors_path, table, params, nullptr, error);
}

bool write_hf_gpt2(const std::string& safetensors_path, const ParameterTable& table,
                   const ParameterReader& read, std::string& error) {
  return write_hf_gpt2(safetensors_path, table, nullptr, read, error);
}

std::string read_hf_gpt2_sources(const ParameterTable& table, const ParameterReader& read) {
  if (!config_problem(table.config()).empty()) return "";  // the writer reads nothing either
  return read_safetensors_sources(hf_tensors(table, nullptr, read));
}

namespace {

HfGpt2Weights read_hf_gpt2(const std::string& safetensors_path, int64_t num_heads,
                           int64_t padded_vocab_multiple, bool read_values) {
  HfGpt2Weights result;
  auto fail = [&](const std::string& problem) {
    result.params.clear();
    result.error = fmt::format("GPT-2 weights '{}': {}", safetensors_path, problem);
    return result;
  };
  SafetensorsFile file;
  if (!file.open(safetensors_path, result.error)) return result;
  TensorIndex index;
  if (const std::string problem = index_tensors(file, index); !problem.empty()) {
    return fail(problem);
  }

  // The sizes follow from the embeddings and the blocks present.
  const SafetensorsTensor* wte = find(index, kTokenEmbedding);
  const SafetensorsTensor* wpe = find(index, kPositionEmbedding);
  if (wte == nullptr) return fail(missing(kTokenEmbedding));
  if (wpe == nullptr) return fail(missing(kPositionEmbedding));
  if (wte->shape.size() != 2 || wpe->shape.size() != 2 || wte->shape[1] != wpe->shape[1]) {
    return fail(fmt::format(
        "the token embedding '{}' has shape {} and the position embedding '{}' {}; they must be "
        "(vocab, channels) and (positions, channels)",
        wte->name, shape_text(wte->shape), wpe->name, shape_text(wpe->shape)));
  }
  if (index.layers.empty()) return fail("it has no transformer blocks (tensors h.0.*)");
  const int64_t last_layer = *index.layers.rbegin();
  for (int64_t layer = 0; layer <= last_layer; ++layer) {
    if (!index.layers.contains(layer)) {
      return fail(
          fmt::format("it has blocks up to h.{} but no tensors of block h.{}", last_layer, layer));
    }
  }
  Gpt2Config& config = result.config;
  config.num_layers = last_layer + 1;
  config.channels = wte->shape[1];
  config.vocab_size = wte->shape[0];
  config.padded_vocab_size = padded_vocab(config.vocab_size, padded_vocab_multiple);
  config.max_seq_len = wpe->shape[0];
  config.num_heads = num_heads;
  const std::string config_path = config_json_path(safetensors_path);
  if (std::filesystem::exists(config_path)) {
    if (const std::string problem = apply_config_json(config_path, config); !problem.empty()) {
      return fail(problem);
    }
  } else if (num_heads == 0) {
    return fail(fmt::format(
        "the number of attention heads is not in the weights and there is no '{}'; give it",
        config_path));
  }
  if (const std::string problem = config_problem(config); !problem.empty()) return fail(problem);

  // Every tensor present and of the right shape before any data is read.
  const ParameterTable table(config);
  std::vector<const SafetensorsTensor*> sources;  // one for each of table.tensors()
  for (const TensorInfo& info : table.tensors()) {
    const SafetensorsTensor* tensor = find(index, info.name);
    if (tensor == nullptr) return fail(missing(info.name));
    const std::vector<int64_t> shape = expected_shape(info, config);
    if (tensor->shape != shape) return fail(wrong_shape(*tensor, shape, config));
    sources.push_back(tensor);
    index.by_name.erase(index.by_name.find(info.name));
  }
  if (!index.by_name.empty()) {
    return fail(fmt::format("tensor '{}' has no place in a GPT-2 (GPT2LMHeadModel)",
                            index.by_name.begin()->second->name));
  }

  if (!read_values) return result;
  result.params.assign(static_cast<size_t>(table.total()), 0.0f);  // padding rows stay 0
  for (size_t i = 0; i < sources.size(); ++i) {
    float* out = result.params.data() + table.tensors()[i].offset;
    if (!file.read_floats(*sources[i], out, result.error)) {
      result.params.clear();
      return result;
    }
  }
  if (index.lm_head != nullptr) {
    // The output layer is the token embedding; a different one cannot be
    // represented, and silently dropping it would change the model.
    const SafetensorsTensor& head = *index.lm_head;
    const std::vector<int64_t> shape = {config.vocab_size, config.channels};
    if (head.shape != shape) return fail(wrong_shape(head, shape, config));
    std::vector<float> values(static_cast<size_t>(head.numel));
    if (!file.read_floats(head, values.data(), result.error)) {
      result.params.clear();
      return result;
    }
    if (std::memcmp(values.data(), result.params.data(), values.size() * sizeof(float)) != 0) {
      return fail(fmt::format(
          "'{}' differs from the token embedding '{}'; dslaunch's GPT-2 ties its output layer "
          "to the token embedding",
          kLmHead, wte->name));
    }
  }
  return result;
}

}  // namespace

HfGpt2Weights load_hf_gpt2(const std::string& safetensors_path, int64_t num_heads,
                           int64_t padded_vocab_multiple) {
  return read_hf_gpt2(safetensors_path, num_heads, padded_vocab_multiple, true);
}

HfGpt2Weights inspect_hf_gpt2(const std::string& safetensors_path, int64_t num_heads,
                              int64_t padded_vocab_multiple) {
  return read_hf_gpt2(safetensors_path, num_heads, padded_vocab_multiple, false);
}

}  // namespace dslaunch::core
