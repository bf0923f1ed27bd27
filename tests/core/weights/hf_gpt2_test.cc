#include "core/weights/hf_gpt2.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "core/weights/safetensors.h"

namespace fs = std::filesystem;
using namespace dslaunch::core;

namespace {

// A fresh, empty folder under $TEST_TMPDIR for each call.
fs::path temp_folder() {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir =
      fs::path(tmp != nullptr ? tmp : fs::temp_directory_path().string()) /
      ("hf_gpt2_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// 2 blocks, 8 channels, 2 heads, 11 real tokens padded to 16, 5 positions.
Gpt2Config tiny_config() {
  Gpt2Config config;
  config.num_layers = 2;
  config.channels = 8;
  config.num_heads = 2;
  config.vocab_size = 11;
  config.padded_vocab_size = padded_vocab(11, 8);
  config.max_seq_len = 5;
  return config;
}

// Distinct values, exact in half and bfloat16 (k/64, |k| <= 48); the
// embedding's padding rows 0.
std::vector<float> tiny_params(const ParameterTable& table) {
  std::vector<float> params(static_cast<size_t>(table.total()));
  for (size_t i = 0; i < params.size(); ++i) {
    params[i] = static_cast<float>(static_cast<int>(i % 97) - 48) / 64.0f;
  }
  const TensorInfo& wte = table.at("transformer.wte.weight");
  const Gpt2Config& config = table.config();
  std::fill(params.begin() + wte.offset + config.vocab_size * config.channels,
            params.begin() + wte.offset + wte.numel, 0.0f);
  return params;
}

// Exact for zero and normal halves, which is all tiny_params holds.
uint16_t to_half(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  if ((bits & 0x7fffffffu) == 0) return sign;
  const uint32_t exponent = ((bits >> 23) & 0xffu) - 127 + 15;
  return static_cast<uint16_t>(sign | (exponent << 10) | ((bits >> 13) & 0x3ffu));
}

uint16_t to_bfloat16(float value) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16);
}

// How a tensor of a file "from another tool" is stored.
struct ForeignTensor {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

ForeignTensor encode(std::string name, SafetensorsDtype dtype, std::vector<int64_t> shape,
                     const float* values) {
  int64_t numel = 1;
  for (const int64_t d : shape) numel *= d;
  ForeignTensor tensor{std::move(name), dtype, std::move(shape), {}};
  for (int64_t i = 0; i < numel; ++i) {
    if (dtype == SafetensorsDtype::kF32) {
      const auto bits = std::bit_cast<std::array<uint8_t, 4>>(values[i]);
      tensor.bytes.insert(tensor.bytes.end(), bits.begin(), bits.end());
    } else {
      const uint16_t half =
          dtype == SafetensorsDtype::kF16 ? to_half(values[i]) : to_bfloat16(values[i]);
      tensor.bytes.push_back(static_cast<uint8_t>(half & 0xff));
      tensor.bytes.push_back(static_cast<uint8_t>(half >> 8));
    }
  }
  return tensor;
}

// The tiny model as a tool other than dslaunch stores it: no "transformer."
// prefix, matrices in F16, vectors and embeddings in BF16, the causal-mask
// buffers of older transformers versions and a tied lm_head.weight.
std::vector<ForeignTensor> foreign_tensors(const ParameterTable& table,
                                           const std::vector<float>& params) {
  const Gpt2Config& config = table.config();
  std::vector<ForeignTensor> tensors;
  for (const TensorInfo& info : table.tensors()) {
    std::vector<int64_t> shape = info.shape;
    if (info.name == "transformer.wte.weight") shape[0] = config.vocab_size;
    const SafetensorsDtype dtype = info.shape.size() == 2 && info.layer >= 0
                                       ? SafetensorsDtype::kF16
                                       : SafetensorsDtype::kBF16;
    tensors.push_back(encode(info.name.substr(std::string("transformer.").size()), dtype, shape,
                             params.data() + info.offset));
  }
  const TensorInfo& wte = table.at("transformer.wte.weight");
  tensors.push_back(encode("lm_head.weight", SafetensorsDtype::kBF16,
                           {config.vocab_size, config.channels}, params.data() + wte.offset));
  const std::vector<float> mask(static_cast<size_t>(config.max_seq_len * config.max_seq_len), 1.0f);
  const float masked_bias = -1e4f;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const std::string block = "h." + std::to_string(layer) + ".attn.";
    tensors.push_back(encode(block + "bias", SafetensorsDtype::kF32,
                             {1, 1, config.max_seq_len, config.max_seq_len}, mask.data()));
    tensors.push_back(encode(block + "masked_bias", SafetensorsDtype::kF32, {}, &masked_bias));
  }
  return tensors;
}

std::string write_foreign(const fs::path& path, const std::vector<ForeignTensor>& tensors) {
  std::vector<SafetensorsTensorData> data;
  for (const ForeignTensor& tensor : tensors) {
    data.push_back({tensor.name, tensor.dtype, tensor.shape, tensor.bytes.data()});
  }
  std::string error;
  REQUIRE(write_safetensors(path.string(), data, {}, error));
  return path.string();
}

ForeignTensor& named(std::vector<ForeignTensor>& tensors, const std::string& name) {
  for (ForeignTensor& tensor : tensors) {
    if (tensor.name == name) return tensor;
  }
  FAIL("no tensor " << name);
  return tensors.front();
}

void check_same_config(const Gpt2Config& a, const Gpt2Config& b) {
  CHECK(a.num_layers == b.num_layers);
  CHECK(a.channels == b.channels);
  CHECK(a.num_heads == b.num_heads);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.padded_vocab_size == b.padded_vocab_size);
  CHECK(a.max_seq_len == b.max_seq_len);
}

}  // namespace

TEST_CASE("write_hf_gpt2 writes Hugging Face names, real vocabulary rows and a config.json") {
  const ParameterTable table(tiny_config());
  const std::vector<float> params = tiny_params(table);
  const fs::path dir = temp_folder();
  const std::string path = (dir / "model.safetensors").string();
  std::string error;
  REQUIRE(write_hf_gpt2(path, table, params.data(), error));

  SafetensorsFile file;
  REQUIRE(file.open(path, error));
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  std::set<std::string> names;
  for (const SafetensorsTensor& tensor : file.tensors()) {
    names.insert(tensor.name);
    CHECK(tensor.dtype == SafetensorsDtype::kF32);
  }
  std::set<std::string> expected;
  for (const TensorInfo& info : table.tensors()) expected.insert(info.name);
  CHECK(names == expected);
  CHECK(names.contains("transformer.h.1.mlp.c_proj.bias"));
  CHECK(file.find("transformer.wte.weight")->shape == std::vector<int64_t>{11, 8});
  CHECK(file.find("transformer.h.0.attn.c_attn.weight")->shape == std::vector<int64_t>{8, 24});
  for (const TensorInfo& info : table.tensors()) {
    const SafetensorsTensor* tensor = file.find(info.name);
    std::vector<float> values(static_cast<size_t>(tensor->numel));
    REQUIRE(file.read_floats(*tensor, values.data(), error));
    INFO(info.name);
    CHECK(std::equal(values.begin(), values.end(), params.begin() + info.offset));
  }

  std::ifstream config_file(dir / "config.json");
  const nlohmann::json config = nlohmann::json::parse(config_file);
  CHECK(config["model_type"] == "gpt2");
  CHECK(config["architectures"] == nlohmann::json::array({"GPT2LMHeadModel"}));
  CHECK(config["n_layer"] == 2);
  CHECK(config["n_embd"] == 8);
  CHECK(config["n_head"] == 2);
  CHECK(config["vocab_size"] == 11);
  CHECK(config["n_positions"] == 5);
  CHECK(config["n_ctx"] == 5);
  CHECK(config["n_inner"].is_null());
  CHECK(config["activation_function"] == "gelu_new");
  CHECK(config["layer_norm_epsilon"] == 1e-5);
  CHECK(config["tie_word_embeddings"] == true);
  CHECK(config["eos_token_id"] == 10);
  Gpt2Config bytes;
  bytes.vocab_size = 256;
  bytes.padded_vocab_size = 256;
  const nlohmann::json byte_config = nlohmann::json::parse(hf_gpt2_config_json(bytes));
  CHECK(byte_config["eos_token_id"] == 0);  // tools/tokenize's document separator
}

TEST_CASE("write_hf_gpt2 from a reader writes the file it writes from memory") {
  const ParameterTable table(tiny_config());
  const std::vector<float> params = tiny_params(table);
  const fs::path dir = temp_folder();
  const std::string from_memory = (dir / "memory.safetensors").string();
  const std::string from_reader = (dir / "reader.safetensors").string();
  std::string error;
  REQUIRE(write_hf_gpt2(from_memory, table, params.data(), error));
  int64_t floats_read = 0;
  const ParameterReader read = [&](int64_t begin, int64_t end, float* out) {
    floats_read += end - begin;
    std::copy(params.begin() + begin, params.begin() + end, out);
    return std::string();
  };
  REQUIRE(write_hf_gpt2(from_reader, table, read, error));
  const auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  CHECK(bytes(from_reader) == bytes(from_memory));
  // Every tensor once, the token embedding's real rows only (11 of 16).
  CHECK(floats_read == table.total() - (16 - 11) * 8);
  // A reader that fails keeps the old file and says where.
  const ParameterReader failing = [](int64_t, int64_t, float*) {
    return std::string("offload_param: reading the swap file: Input/output error");
  };
  CHECK_FALSE(write_hf_gpt2(from_reader, table, failing, error));
  CHECK_THAT(error, Catch::Contains("Input/output error") && Catch::Contains("tensor '"));
  CHECK(bytes(from_reader) == bytes(from_memory));
}

TEST_CASE("load_hf_gpt2 reads back what write_hf_gpt2 wrote") {
  const ParameterTable table(tiny_config());
  const std::vector<float> params = tiny_params(table);
  const fs::path dir = temp_folder();
  const std::string path = (dir / "exported.safetensors").string();
  std::string error;
  REQUIRE(write_hf_gpt2(path, table, params.data(), error));

  SECTION("a config.json nested past the depth cap is refused, not a crash") {
    std::ofstream(dir / "config.json", std::ios::trunc)
        << std::string(100000, '[') << std::string(100000, ']');
    const HfGpt2Weights loaded = load_hf_gpt2(path, 0, 8);
    CHECK_THAT(loaded.error, Catch::Contains("config.json' is not valid JSON: arrays and objects "
                                             "nest deeper than 64 levels"));
  }
  SECTION("heads from config.json, same padding: identical buffer") {
    const HfGpt2Weights loaded = load_hf_gpt2(path, 0, 8);
    REQUIRE(loaded.error.empty());
    check_same_config(loaded.config, table.config());
    CHECK(loaded.params == params);
  }
  SECTION("another padding: the same tensors at the new offsets, zero padding rows") {
    const HfGpt2Weights loaded = load_hf_gpt2(path, 2, 32);
    REQUIRE(loaded.error.empty());
    CHECK(loaded.config.padded_vocab_size == 32);
    const ParameterTable loaded_table(loaded.config);
    for (const TensorInfo& info : table.tensors()) {
      const TensorInfo& other = loaded_table.at(info.name);
      const int64_t real = info.name == "transformer.wte.weight" ? 11 * 8 : info.numel;
      INFO(info.name);
      CHECK(std::equal(params.begin() + info.offset, params.begin() + info.offset + real,
                       loaded.params.begin() + other.offset));
    }
    const TensorInfo& wte = loaded_table.at("transformer.wte.weight");
    CHECK(std::all_of(loaded.params.begin() + wte.offset + 11 * 8,
                      loaded.params.begin() + wte.offset + wte.numel,
                      [](float v) { return v == 0.0f; }));
  }
  SECTION("heads that disagree with config.json") {
    const HfGpt2Weights loaded = load_hf_gpt2(path, 4, 8);
    CHECK_THAT(loaded.error, Catch::Contains("4 attention heads were asked for") &&
                                 Catch::Contains("config.json' has n_head 2"));
    CHECK(loaded.params.empty());
  }
  SECTION("a config.json of another model") {
    std::ofstream(dir / "config.json") << R"({"n_embd": 16, "n_head": 2})";
    CHECK_THAT(load_hf_gpt2(path, 0, 8).error,
               Catch::Contains("has n_embd 16, but the weights have 8"));
  }
  SECTION("no config.json and no head count") {
    fs::remove(dir / "config.json");
    CHECK_THAT(load_hf_gpt2(path, 0, 8).error,
               Catch::Contains("the number of attention heads is not in the weights"));
    CHECK(load_hf_gpt2(path, 2, 8).error.empty());
  }
}

TEST_CASE("load_hf_gpt2 reads F16 and BF16 weights without the transformer. prefix") {
  const ParameterTable table(tiny_config());
  const std::vector<float> params = tiny_params(table);
  const std::string path =
      write_foreign(temp_folder() / "model.safetensors", foreign_tensors(table, params));
  const HfGpt2Weights loaded = load_hf_gpt2(path, 2, 8);
  REQUIRE(loaded.error.empty());
  check_same_config(loaded.config, table.config());
  CHECK(loaded.params == params);
}

TEST_CASE("load_hf_gpt2 names the tensor that is missing, misshapen or out of place") {
  const ParameterTable table(tiny_config());
  const std::vector<float> params = tiny_params(table);
  std::vector<ForeignTensor> tensors = foreign_tensors(table, params);
  const fs::path dir = temp_folder();
  auto load_error = [&](const std::function<void(std::vector<ForeignTensor>&)>& change) {
    std::vector<ForeignTensor> changed = tensors;
    change(changed);
    const std::string path = write_foreign(dir / "model.safetensors", changed);
    const HfGpt2Weights loaded = load_hf_gpt2(path, 2, 8);
    CHECK(loaded.params.empty());
    CHECK_THAT(loaded.error, Catch::Contains(path));
    return loaded.error;
  };
  auto drop = [](const std::string& name) {
    return [name](std::vector<ForeignTensor>& t) {
      std::erase_if(t, [&](const ForeignTensor& x) { return x.name == name; });
    };
  };

  CHECK_THAT(load_error(drop("h.1.ln_2.bias")),
             Catch::Contains("no tensor 'transformer.h.1.ln_2.bias' (or 'h.1.ln_2.bias')"));
  CHECK_THAT(load_error(drop("wte.weight")), Catch::Contains("no tensor 'transformer.wte.weight'"));
  CHECK_THAT(load_error([](auto& t) {
               std::erase_if(t, [](const ForeignTensor& x) { return x.name.starts_with("h.0."); });
             }),
             Catch::Contains("it has blocks up to h.1 but no tensors of block h.0"));
  CHECK_THAT(load_error([](auto& t) {
               ForeignTensor& w = named(t, "h.0.attn.c_attn.weight");
               w.shape = {24, 8};
             }),
             Catch::Contains("tensor 'h.0.attn.c_attn.weight' has shape [24, 8]") &&
                 Catch::Contains("needs [8, 24]") && Catch::Contains("looks transposed"));
  CHECK_THAT(load_error([](auto& t) {
               named(t, "wpe.weight").shape = {10, 4};
             }),
             Catch::Contains("position embedding 'wpe.weight' [10, 4]"));
  CHECK_THAT(
      load_error([&](auto& t) {
        t.push_back(encode("h.0.attn.q_proj.weight", SafetensorsDtype::kF32, {1}, params.data()));
      }),
      Catch::Contains("tensor 'h.0.attn.q_proj.weight' has no place in a GPT-2"));
  CHECK_THAT(
      load_error([&](auto& t) {
        t.push_back(encode("transformer.ln_f.bias", SafetensorsDtype::kF32, {8}, params.data()));
      }),
      Catch::Contains("tensor 'transformer.ln_f.bias' is in the file twice"));
  CHECK_THAT(load_error([](auto& t) { named(t, "lm_head.weight").bytes[5] ^= 1; }),
             Catch::Contains("'lm_head.weight' differs from the token embedding"));
  CHECK_THAT(load_error([](auto& t) {
               ForeignTensor& bias = named(t, "ln_f.bias");
               bias.dtype = SafetensorsDtype::kI16;
             }),
             Catch::Contains("tensor 'ln_f.bias' has dtype I16"));
}
