#include "launcher/checkpoint_export.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher/controller/checkpoint_catalog.h"
#include "core/checkpoint/shard_file.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"

namespace dslaunch::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

core::Gpt2Config tiny_model() {
  core::Gpt2Config config;
  config.num_layers = 1;
  config.channels = 8;
  config.num_heads = 2;
  config.vocab_size = 16;
  config.padded_vocab_size = 16;
  config.max_seq_len = 4;
  return config;
}

json model_json(const core::Gpt2Config& config) {
  return {{"architecture", "gpt2"},
          {"num_layers", config.num_layers},
          {"hidden_size", config.channels},
          {"num_attention_heads", config.num_heads},
          {"vocab_size", config.vocab_size},
          {"padded_vocab_size", config.padded_vocab_size},
          {"seq_length", config.max_seq_len}};
}

// One rank's checkpoint of the tiny model in a fresh step_00000010 folder,
// with parameter i equal to i; returns the folder and the manifest.
std::pair<std::string, controller::CheckpointManifest> tiny_checkpoint(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path root = fs::path(tmp ? tmp : "/tmp") / "checkpoint_export_test" / name;
  fs::remove_all(root);
  const fs::path dir = root / controller::checkpoint_dir_name(10);
  fs::create_directories(dir);
  const core::ParameterTable table(tiny_model());
  const int64_t total = table.total();
  std::vector<float> params(total);
  for (int64_t i = 0; i < total; ++i) params[i] = static_cast<float>(i);
  const std::vector<float> zeros(total, 0.0f);
  core::ShardHeader header;
  header.step = 10;
  header.total_parameters = total;
  header.end = total;
  header.layout = core::layout_of(table);
  const core::WrittenShard written =
      core::write_shard((dir / "rank_0.bin").string(), header,
                        {{{core::StateKind::kParameter, core::DType::kF32}, params.data()},
                         {{core::StateKind::kAdamM, core::DType::kF32}, zeros.data()},
                         {{core::StateKind::kAdamV, core::DType::kF32}, zeros.data()}});
  INFO(written.error);
  REQUIRE(written.ok());
  controller::CheckpointManifest manifest;
  manifest.job_id = "export-test";
  manifest.spec_hash = "0123456789abcdef";
  manifest.step = 10;
  manifest.total_parameters = total;
  manifest.model = model_json(tiny_model());
  manifest.shards = {{0, "rank_0.bin", written.size_bytes, written.xxh64, 0, total}};
  std::string error;
  REQUIRE(controller::write_manifest(dir.string(), manifest, error));
  return {dir.string(), manifest};
}

TEST_CASE("a checkpoint consolidates into its parameters") {
  const auto [dir, manifest] = tiny_checkpoint("valid");
  const ConsolidatedCheckpoint out = consolidate_checkpoint(dir);
  REQUIRE(out.error.empty());
  CHECK(out.step == 10);
  REQUIRE(static_cast<int64_t>(out.params.size()) == manifest.total_parameters);
  CHECK(out.params.back() == static_cast<float>(manifest.total_parameters - 1));
}

TEST_CASE("a manifest's model fields are checked before anything is copied") {
  auto [dir, manifest] = tiny_checkpoint("bad-model");
  const auto [key, value, message] = GENERATE(table<std::string, json, std::string>({
      // More real rows than the embedding holds: read past the buffer before.
      {"vocab_size", 32, "padded_vocab_size (16) is below vocab_size (32)"},
      {"num_layers", -5, "num_layers is -5; it must be in 1..4096"},
      {"num_layers", "1", "'num_layers' must be an integer, not \"1\""},
      {"num_layers", 1.5, "'num_layers' must be an integer, not 1.5"},
      {"hidden_size", int64_t{1} << 40, "channels is 1099511627776; it must be in 1..1048576"},
      {"seq_length", nullptr, "'seq_length' must be an integer, not null"},
      {"num_attention_heads", 3, "channels (8) must be a positive multiple of num_heads (3)"},
  }));
  INFO(key << " = " << value.dump());
  manifest.model[key] = value;
  std::string error;
  REQUIRE(controller::write_manifest(dir, manifest, error));
  const ConsolidatedCheckpoint out = consolidate_checkpoint(dir);
  CHECK_THAT(out.error, Catch::Contains("the manifest's model is not usable: " + message));
  CHECK(out.params.empty());
}

TEST_CASE("a manifest whose model disagrees with its shards is refused") {
  auto [dir, manifest] = tiny_checkpoint("other-model");
  SECTION("a missing field") {
    manifest.model.erase("padded_vocab_size");
    std::string error;
    REQUIRE(controller::write_manifest(dir, manifest, error));
    CHECK_THAT(consolidate_checkpoint(dir).error, Catch::Contains("'padded_vocab_size' is missing"));
  }
  SECTION("a larger shape") {
    manifest.model["padded_vocab_size"] = 32;
    manifest.model["vocab_size"] = 32;
    std::string error;
    REQUIRE(controller::write_manifest(dir, manifest, error));
    CHECK_THAT(consolidate_checkpoint(dir).error,
               Catch::Contains("the manifest's model has") && Catch::Contains("its shards hold"));
  }
}

TEST_CASE("a checkpoint root whose newest checkpoint is of a newer format is not exported") {
  const auto [dir, manifest] = tiny_checkpoint("newer-format");
  json value = controller::manifest_to_json(manifest);
  value["format_version"] = 3;  // this dslaunch reads 1 and 2
  const std::string text = value.dump();
  FILE* file = std::fopen((dir + "/manifest.json").c_str(), "w");
  REQUIRE(file);
  std::fwrite(text.data(), 1, text.size(), file);
  std::fclose(file);
  std::string error;
  CHECK(checkpoint_folder_of(fs::path(dir).parent_path().string(), error).empty());
  CHECK_THAT(error, Catch::Contains("format_version 3, newer than the 2 this dslaunch reads"));
  CHECK_THAT(consolidate_checkpoint(dir).error, Catch::Contains("format_version 3"));
}

}  // namespace
}  // namespace dslaunch::launcher
