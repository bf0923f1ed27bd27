#include "launcher/controller/checkpoint_committer.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "core/atomic_file.h"

namespace dslaunch::controller {

CheckpointCommitter::CheckpointCommitter(Settings settings) : settings_(std::move(settings)) {}

CheckpointCommitter::Outcome CheckpointCommitter::on_shard_written(int rank,
                                                                   const v1::WorkerEvent& event,
                                                                   int64_t now_unix_ms) {
  Outcome outcome;
  outcome.step = event.step();
  if (rank < 0 || rank >= settings_.ranks || event.shards_size() != 1) {
    outcome.error = fmt::format(
        "rank {} reported {} shard(s) for the checkpoint of step {}; expected one from each of "
        "ranks 0-{}",
        rank, event.shards_size(), event.step(), settings_.ranks - 1);
    return outcome;
  }
  const v1::CheckpointShard& shard = event.shards(0);
  // The ranks know the model's size; the first report of the job sets it.
  if (settings_.base.total_parameters == 0) {
    settings_.base.total_parameters = shard.model_parameters();
  }
  if (shard.model_parameters() != settings_.base.total_parameters) {
    outcome.error = fmt::format(
        "rank {}'s shard of step {} is of a model of {} parameters, the others' of {}", rank,
        event.step(), shard.model_parameters(), settings_.base.total_parameters);
    return outcome;
  }
  if (shard.total_parameters() < 1 || shard.begin() < 0 || shard.begin() > shard.end() ||
      shard.end() > shard.total_parameters() || shard.tensor_rank() < 0 ||
      shard.tensor_rank() >= settings_.base.tensor_parallel || shard.stage() < 0 ||
      shard.stage() >= settings_.base.pipeline_parallel) {
    outcome.error = fmt::format(
        "rank {}'s shard of step {} covers [{}, {}) of the {} parameters of tensor rank {} of "
        "stage {}, outside its slice or the grid (tensor {} x pipeline {})",
        rank, event.step(), shard.begin(), shard.end(), shard.total_parameters(),
        shard.tensor_rank(), shard.stage(), settings_.base.tensor_parallel,
        settings_.base.pipeline_parallel);
    return outcome;
  }
  std::map<int, ShardRecord>& reported = pending_[event.step()];
  ShardRecord record{rank, shard.path(), shard.size_bytes(), shard.xxh64(), shard.begin(),
                     shard.end()};
  record.tensor_rank = shard.tensor_rank();
  record.stage = shard.stage();
  record.slice_parameters = shard.total_parameters();
  if (!reported.emplace(rank, std::move(record)).second) {
    outcome.error = fmt::format("rank {} reported its shard of step {} twice", rank, event.step());
    return outcome;
  }
  if (static_cast<int>(reported.size()) < settings_.ranks) return outcome;
  return commit(event.step(), now_unix_ms);
}

CheckpointCommitter::Outcome CheckpointCommitter::commit(int64_t step, int64_t now_unix_ms) {
  Outcome outcome;
  outcome.step = step;
  CheckpointManifest manifest = settings_.base;
  manifest.step = step;
  manifest.samples_seen =
      settings_.samples_before + (step - settings_.first_step) * settings_.samples_per_step;
  manifest.tokens_seen =
      settings_.tokens_before + (step - settings_.first_step) * settings_.tokens_per_step;
  manifest.data_positions["samples_consumed"] = manifest.samples_seen;
  manifest.scheduler["last_step"] = step;
  manifest.created_unix_ms = now_unix_ms;
  for (auto& [rank, shard] : pending_[step]) manifest.shards.push_back(shard);
  std::sort(manifest.shards.begin(), manifest.shards.end(),
            [](const ShardRecord& a, const ShardRecord& b) {
              return std::tuple(a.stage, a.tensor_rank, a.begin) <
                     std::tuple(b.stage, b.tensor_rank, b.begin);
            });
  pending_.erase(step);
  const std::string dir =
      (std::filesystem::path(settings_.root) / checkpoint_dir_name(step)).string();
  // The ranks wrote their shards where they see checkpoint.dir; the
  // controller must see them there too, or no restart could read them.
  for (const ShardRecord& shard : manifest.shards) {
    std::error_code error;
    const auto size = std::filesystem::file_size(std::filesystem::path(dir) / shard.path, error);
    if (error || static_cast<int64_t>(size) != shard.size_bytes) {
      outcome.error = fmt::format(
          "rank {} reported its shard {} ({} bytes), but the controller finds {} in {}: "
          "checkpoint.dir must be on a filesystem every host shares",
          shard.rank, shard.path, shard.size_bytes,
          error ? error.message() : fmt::format("{} bytes", size), dir);
      return outcome;
    }
  }
  if (!core::write_file_atomically((std::filesystem::path(dir) / "spec.yaml").string(),
                                           settings_.resolved_spec_yaml, outcome.error, 0600) ||
      !write_manifest(dir, manifest, outcome.error) ||
      !write_latest(settings_.root, step, outcome.error)) {
    return outcome;
  }
  outcome.committed = true;
  last_committed_ = step;
  std::string prune_error;
  outcome.removed = prune_checkpoints(settings_.root, settings_.keep, prune_error, step);
  if (!prune_error.empty()) outcome.error = "the checkpoint is saved, but " + prune_error;
  return outcome;
}

}  // namespace dslaunch::controller
