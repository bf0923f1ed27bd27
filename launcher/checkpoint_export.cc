#include "launcher/checkpoint_export.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/controller/checkpoint_catalog.h"
#include "worker/checkpoint/shard_file.h"

namespace dslaunch::launcher {

namespace fs = std::filesystem;

ConsolidatedCheckpoint consolidate_checkpoint(const std::string& dir) {
  ConsolidatedCheckpoint out;
  const controller::CheckpointCheck check = controller::check_checkpoint(dir, true);
  if (!check.valid()) {
    out.error = check.problem;
    return out;
  }
  const controller::CheckpointManifest& manifest = *check.manifest;
  try {
    const nlohmann::json& model = manifest.model;
    out.config.num_layers = model.at("num_layers").get<int>();
    out.config.channels = model.at("hidden_size").get<int>();
    out.config.num_heads = model.at("num_attention_heads").get<int>();
    out.config.vocab_size = model.at("vocab_size").get<int>();
    out.config.padded_vocab_size = model.at("padded_vocab_size").get<int>();
    out.config.max_seq_len = model.at("seq_length").get<int>();
  } catch (const nlohmann::json::exception& error) {
    out.error = fmt::format("{}: the manifest's model is incomplete: {}", dir, error.what());
    return out;
  }
  const worker::model::ParameterTable table(out.config);
  if (table.total() != manifest.total_parameters) {
    out.error = fmt::format(
        "{}: the manifest's model has {} parameters but its shards hold {}", dir, table.total(),
        manifest.total_parameters);
    return out;
  }
  std::vector<worker::checkpoint::ShardLocation> shards;
  for (const controller::ShardRecord& shard : manifest.shards) {
    shards.push_back({(fs::path(dir) / shard.path).string(), shard.begin, shard.end});
  }
  out.params.resize(table.total());
  if (!worker::checkpoint::read_flat_range(shards, worker::checkpoint::ShardArray::kParams, 0,
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
  error = newest.skipped.empty()
              ? fmt::format("{} holds no checkpoint", source)
              : fmt::format("{} holds no valid checkpoint; the newest: {}", source,
                            newest.skipped.front().problem);
  return "";
}

}  // namespace dslaunch::launcher
