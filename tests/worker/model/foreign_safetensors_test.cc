// load_hf_gpt2 on files dslaunch did not write: tools/reference's
// write-foreign lays GPT-2 weights out the way other tools do (names
// without "transformer.", the causal-mask buffers, a tied lm_head.weight,
// tensors in name order, an unpadded header, F16 and BF16) with json, struct
// and numpy alone, so that neither our writer nor our reader's assumptions
// shape the file.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "tests/support/run_command.h"
#include "worker/data/consecutive_batch.h"
#include "worker/data/llmc_token_file.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "worker/model/gpt2_model.h"
#include "core/weights/hf_gpt2.h"
#include "core/weights/safetensors.h"

namespace fs = std::filesystem;
namespace core = dslaunch::core;
namespace data = dslaunch::worker::data;
namespace kernels = dslaunch::kernels;
namespace testing = dslaunch::testing;
using namespace dslaunch::worker::model;

namespace {

constexpr int64_t kVocab = 50;
constexpr int64_t kPaddingMultiple = 64;
constexpr int64_t kPositions = 16;

fs::path temp_folder() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : fs::temp_directory_path().string()) /
                       ("foreign_safetensors_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

core::Gpt2Config tiny_config() {
  core::Gpt2Config config;
  config.num_layers = 2;
  config.channels = 32;
  config.num_heads = 2;
  config.vocab_size = kVocab;
  config.padded_vocab_size = core::padded_vocab(kVocab, kPaddingMultiple);
  config.max_seq_len = kPositions;
  return config;
}

testing::CommandResult reference(const std::string& arguments) {
  return testing::run_command(fmt::format(
      "/usr/bin/python3 {} {}", testing::runfile("tools/reference/gpt2_reference.py"), arguments));
}

// Half the spacing of `dtype`'s values around x: the most round-to-nearest
// may move it. F16 has 10 fraction bits and subnormals below 2^-14; BF16 has
// 7 and float's exponent range.
double half_ulp(float x, core::SafetensorsDtype dtype) {
  if (dtype == core::SafetensorsDtype::kF32 || x == 0.0f) return 0;
  if (dtype == core::SafetensorsDtype::kBF16) return std::ldexp(1.0, std::ilogb(x) - 8);
  return std::ldexp(1.0, std::max(std::ilogb(x), -14) - 11);
}

// The header's length, read as the format defines it (a little-endian
// uint64 at offset 0).
uint64_t header_length(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  unsigned char bytes[8] = {};
  file.read(reinterpret_cast<char*>(bytes), 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | bytes[i];
  return length;
}

// The file is laid out as the test means it to be: foreign names and
// buffers, weights in `dtype`, tensors not ordered by alignment, and data
// that starts at an offset that is not a multiple of 8.
void check_foreign_layout(const std::string& path, core::SafetensorsDtype dtype, bool lm_head) {
  CHECK(header_length(path) % 8 != 0);
  core::SafetensorsFile file;
  std::string error;
  REQUIRE(file.open(path, error));
  CHECK(file.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  for (const core::SafetensorsTensor& tensor : file.tensors()) {
    INFO(tensor.name);
    CHECK_FALSE(tensor.name.starts_with("transformer."));
    const bool buffer =
        tensor.name.ends_with(".attn.bias") || tensor.name.ends_with(".attn.masked_bias");
    CHECK(tensor.dtype == (buffer ? core::SafetensorsDtype::kF32 : dtype));
  }
  REQUIRE(file.find("h.1.attn.bias") != nullptr);
  CHECK(file.find("h.1.attn.bias")->shape == std::vector<int64_t>{1, 1, kPositions, kPositions});
  REQUIRE(file.find("h.0.attn.masked_bias") != nullptr);
  CHECK(file.find("h.0.attn.masked_bias")->shape.empty());
  CHECK((file.find("lm_head.weight") != nullptr) == lm_head);
  if (dtype != core::SafetensorsDtype::kF32) {
    // An F32 mask stored after 2-byte tensors: the safetensors library
    // would have put every F32 tensor first.
    CHECK(file.find("h.1.attn.bias")->begin > file.find("h.0.mlp.c_fc.weight")->begin);
  }
}

// The mean loss of the first `batches` consecutive (B, T) batches.
double mean_loss(const core::ParameterTable& table, const std::vector<float>& params,
                 const data::TokenSource& tokens, int64_t B, int64_t T, int64_t batches) {
  auto backend = kernels::make_cpu_backend(1);
  Gpt2Model model(table, *backend, B, T);
  std::vector<int32_t> inputs(B * T), targets(B * T);
  double sum = 0;
  for (int64_t n = 0; n < batches; ++n) {
    data::consecutive_batch(data::whole(tokens), n, B, T, inputs.data(), targets.data());
    sum += model.forward(params.data(), inputs.data(), targets.data(), B);
  }
  return sum / static_cast<double>(batches);
}

}  // namespace

TEST_CASE("load_hf_gpt2 loads GPT-2 safetensors laid out by other tools, in F32, F16 and BF16") {
  const core::ParameterTable table(tiny_config());
  std::vector<float> params(static_cast<size_t>(table.total()));
  init_gpt2_parameters(table, 3, params.data());
  const fs::path dir = temp_folder();
  const std::string ours = (dir / "ours" / "model.safetensors").string();
  fs::create_directories(dir / "ours");
  std::string error;
  REQUIRE(core::write_hf_gpt2(ours, table, params.data(), error));

  struct Case {
    const char* flag;
    core::SafetensorsDtype dtype;
    bool lm_head;
  };
  const Case c = GENERATE(Case{"f32", core::SafetensorsDtype::kF32, false},
                          Case{"f16", core::SafetensorsDtype::kF16, true},
                          Case{"bf16", core::SafetensorsDtype::kBF16, true});
  INFO("--dtype " << c.flag);
  const std::string path = (dir / fmt::format("{}.safetensors", c.flag)).string();
  const auto written = reference(fmt::format("write-foreign --weights {} --out {} --dtype {}{}",
                                             ours, path, c.flag, c.lm_head ? " --lm-head" : ""));
  INFO(written.output);
  REQUIRE(written.exit_code == 0);
  check_foreign_layout(path, c.dtype, c.lm_head);

  // No config.json beside the file: the head count comes from the caller.
  const core::HfGpt2Weights loaded = core::load_hf_gpt2(path, 2, kPaddingMultiple);
  INFO(loaded.error);
  REQUIRE(loaded.error.empty());
  CHECK(loaded.config.num_layers == 2);
  CHECK(loaded.config.channels == 32);
  CHECK(loaded.config.num_heads == 2);
  CHECK(loaded.config.vocab_size == kVocab);
  CHECK(loaded.config.padded_vocab_size == core::padded_vocab(kVocab, kPaddingMultiple));
  CHECK(loaded.config.max_seq_len == kPositions);
  REQUIRE(loaded.params.size() == params.size());

  // Every real value within its dtype's rounding, the padding rows zero;
  // and, for F16 and BF16, rounded for real.
  const core::TensorInfo& wte = table.at("transformer.wte.weight");
  const int64_t padding_begin = wte.offset + kVocab * table.config().channels;
  const int64_t padding_end = wte.offset + wte.numel;
  int64_t outside = 0, rounded = 0;
  for (int64_t i = 0; i < table.total(); ++i) {
    if (i >= padding_begin && i < padding_end) {
      outside += loaded.params[i] != 0.0f;
      continue;
    }
    const double difference = std::abs(static_cast<double>(loaded.params[i]) - params[i]);
    outside += difference > half_ulp(params[i], c.dtype);
    rounded += difference > 0;
  }
  CHECK(outside == 0);
  if (c.dtype == core::SafetensorsDtype::kF32) {
    CHECK(rounded == 0);
  } else {
    CHECK(rounded > table.total() / 2);
  }
}

TEST_CASE("the engine's loss on foreign F16 weights equals PyTorch's on the same file") {
  const core::ParameterTable table(tiny_config());
  std::vector<float> params(static_cast<size_t>(table.total()));
  init_gpt2_parameters(table, 4, params.data());
  const fs::path dir = temp_folder();
  const std::string ours = (dir / "ours" / "model.safetensors").string();
  fs::create_directories(dir / "ours");
  std::string error;
  REQUIRE(core::write_hf_gpt2(ours, table, params.data(), error));
  const std::string f16 = (dir / "f16.safetensors").string();
  const auto written = reference(
      fmt::format("write-foreign --weights {} --out {} --dtype f16 --lm-head", ours, f16));
  INFO(written.output);
  REQUIRE(written.exit_code == 0);

  constexpr int64_t B = 2, T = kPositions, batches = 4;
  std::mt19937 engine(9);
  std::vector<uint16_t> tokens(B * T * batches + 1);
  for (uint16_t& token : tokens) token = static_cast<uint16_t>(engine() % kVocab);
  const std::string token_path = (dir / "tokens.bin").string();
  REQUIRE(data::write_llmc_token_file(token_path, tokens, error));
  const data::TokenSourceResult source = data::open_llmc_token_file(token_path);
  REQUIRE(source.error.empty());

  const core::HfGpt2Weights loaded = core::load_hf_gpt2(f16, 2, kPaddingMultiple);
  INFO(loaded.error);
  REQUIRE(loaded.error.empty());
  const core::ParameterTable loaded_table(loaded.config);
  const double engine_loss = mean_loss(loaded_table, loaded.params, *source.source, B, T, batches);

  const auto evaluated =
      reference(fmt::format("eval --weights {} --tokens {} --n-head 2 --batch {} --seq {} "
                            "--batches {} --threads 1",
                            f16, token_path, B, T, batches));
  INFO(evaluated.output);
  REQUIRE(evaluated.exit_code == 0);
  const std::string& out = evaluated.output;
  const double torch_loss = nlohmann::json::parse(out.substr(out.rfind('{')))["loss"];
  CHECK(engine_loss == Approx(torch_loss).epsilon(1e-5));
  // Random tokens: the untrained model's loss is about ln(vocabulary).
  CHECK(engine_loss == Approx(std::log(static_cast<double>(kVocab))).epsilon(0.05));
  std::printf("F16 foreign weights: engine loss %.8f, PyTorch %.8f, relative difference %.3g\n",
              engine_loss, torch_loss, std::abs(engine_loss - torch_loss) / torch_loss);
}
