#include "launcher/checkpoint_export.h"

#include <cstdint>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "launcher/controller/checkpoint_catalog.h"
#include "core/checkpoint/shard_file.h"

namespace dslaunch::launcher {

namespace fs = std::filesystem;

namespace {

// The manifest's "model" object into `config`; "" or what is wrong (a field
// missing, not an integer, or out of int64's range).
std::string model_config_from_manifest(const nlohmann::json& model,
                                       core::Gpt2Config& config) {
  if (!model.is_object()) return fmt::format("it is {}, not an object", model.type_name());
  const std::pair<const char*, int64_t*> fields[] = {
      {"num_layers", &config.num_layers},
      {"hidden_size", &config.channels},
      {"num_attention_heads", &config.num_heads},
      {"vocab_size", &config.vocab_size},
      {"padded_vocab_size", &config.padded_vocab_size},
      {"seq_length", &config.max_seq_len}};
  for (const auto& [key, value] : fields) {
    const auto found = model.find(key);
    if (found == model.end()) return fmt::format("'{}' is missing", key);
    if (!found->is_number_integer() ||
        (found->is_number_unsigned() && found->get<uint64_t>() > INT64_MAX)) {
      return fmt::format("'{}' must be an integer, not {}", key, core::json_excerpt(*found));
    }
    *value = found->get<int64_t>();
  }
  return "";
}

}  // namespace

ConsolidatedCheckpoint consolidate_checkpoint(const std::string& dir) {
  ConsolidatedCheckpoint out;
  const controller::CheckpointCheck check = controller::check_checkpoint(dir, true);
  if (!check.valid()) {
    out.error = check.problem;
    return out;
  }
  const controller::CheckpointManifest& manifest = *check.manifest;
  // Every number below sizes a copy: each is checked before any is used.
  std::string problem = model_config_from_manifest(manifest.model, out.config);
  if (problem.empty()) problem = core::config_problem(out.config);
  if (!problem.empty()) {
    out.error = fmt::format("{}: the manifest's model is not usable: {}", dir, problem);
    return out;
  }
  const core::ParameterTable table(out.config);
  if (table.total() != manifest.total_parameters) {
    out.error = fmt::format(
        "{}: the manifest's model has {} parameters but its shards hold {}", dir, table.total(),
        manifest.total_parameters);
    return out;
  }
  // A shard holds three float arrays (parameters, Adam m and v) over its range.
  int64_t shard_bytes = 0;
  for (const controller::ShardRecord& shard : manifest.shards) {
    if (__builtin_add_overflow(shard_bytes, shard.size_bytes, &shard_bytes)) shard_bytes = INT64_MAX;
  }
  if (shard_bytes / (3 * static_cast<int64_t>(sizeof(float))) < table.total()) {
    out.error = fmt::format(
        "{}: its shards have {} bytes in all, too few for the {} parameters the manifest names",
        dir, shard_bytes, table.total());
    return out;
  }
  std::vector<core::ShardLocation> shards;
  for (const controller::ShardRecord& shard : manifest.shards) {
    shards.push_back({(fs::path(dir) / shard.path).string(), shard.begin, shard.end});
  }
  out.params.resize(table.total());
  if (!core::read_flat_range(shards, core::layout_of(table), core::StateKind::kParameter, 0,
                             table.total(), out.params.data(), out.error)) {
    out.params.clear();
    return out;
  }
  out.step = manifest.step;
  return out;
}

std::string checkpoint_folder_of(const std::string& source, std::string& error) {
  if (fs::is_regular_file(fs::path(source) / "manifest.json")) return source;
  if (!fs::is_directory(source)) {
    error = fmt::format("{} is not a checkpoint folder", source);
    return "";
  }
  const controller::NewestValid newest = controller::find_newest_valid(source);
  if (newest.found) return newest.found->dir;
  if (!newest.error.empty()) {
    error = fmt::format("{}: {}", source, newest.error);
    return "";
  }
  error = newest.skipped.empty()
              ? fmt::format("{} holds no checkpoint", source)
              : fmt::format("{} holds no valid checkpoint; the newest: {}", source,
                            newest.skipped.front().problem);
  return "";
}

}  // namespace dslaunch::launcher
