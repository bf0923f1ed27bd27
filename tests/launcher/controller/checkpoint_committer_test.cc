// The controller's commit of a checkpoint: nothing until every rank has
// reported, then the manifest, `latest` and pruning; reports that cannot be
// right, and shards the controller cannot see, are errors.
#include "launcher/controller/checkpoint_committer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "launcher/controller/checkpoint_catalog.h"
#include "core/checkpoint/file_checksum.h"

namespace dslaunch::controller {
namespace {

namespace fs = std::filesystem;

std::string fresh_folder(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path folder = fs::path(tmp ? tmp : "/tmp") / "checkpoint_committer_test" / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder.string();
}

CheckpointCommitter::Settings settings(const std::string& root, int keep) {
  CheckpointCommitter::Settings out;
  out.root = root;
  out.keep = keep;
  out.ranks = 2;
  out.base.job_id = "job";
  out.base.spec_hash = "0123456789abcdef";
  out.base.data_parallel = 2;
  out.base.zero_stage = 2;
  out.base.model = {{"num_layers", 2}};
  out.samples_per_step = 8;
  out.tokens_per_step = 256;
  out.resolved_spec_yaml = "name: job\n";
  return out;
}

// Writes rank `rank`'s shard of `step` (floats [begin, end) of its slice of
// `slice_parameters`, 4 bytes each, of a model of 100) and the event the
// rank would send for it.
v1::WorkerEvent shard_of(const std::string& root, int64_t step, int rank, int64_t begin,
                         int64_t end, int tensor_rank = 0, int64_t slice_parameters = 100) {
  const fs::path folder = fs::path(root) / checkpoint_dir_name(step);
  fs::create_directories(folder);
  const std::string name = "rank_" + std::to_string(rank) + ".bin";
  std::ofstream(folder / name, std::ios::binary) << std::string((end - begin) * 4, 'a' + rank);
  std::string error;
  v1::WorkerEvent event;
  event.set_kind(v1::WorkerEvent::KIND_CHECKPOINT_WRITTEN);
  event.set_step(step);
  v1::CheckpointShard* shard = event.add_shards();
  shard->set_path(name);
  shard->set_size_bytes((end - begin) * 4);
  shard->set_xxh64(*core::file_xxh64((folder / name).string(), error));
  shard->set_begin(begin);
  shard->set_end(end);
  shard->set_total_parameters(slice_parameters);
  shard->set_model_parameters(100);
  shard->set_tensor_rank(tensor_rank);
  return event;
}

TEST_CASE("a checkpoint is committed when the last rank reports, with every field") {
  const std::string root = fresh_folder("commit");
  CheckpointCommitter committer(settings(root, 3));
  const auto first = committer.on_shard_written(1, shard_of(root, 20, 1, 48, 100), 1000);
  CHECK_FALSE(first.committed);
  CHECK(first.error.empty());
  CHECK_FALSE(fs::exists(fs::path(root) / "step_00000020" / "manifest.json"));
  CHECK_FALSE(committer.last_committed());

  const auto second = committer.on_shard_written(0, shard_of(root, 20, 0, 0, 48), 2000);
  CHECK(second.committed);
  CHECK(second.step == 20);
  CHECK(second.error.empty());
  CHECK(committer.last_committed() == 20);
  CHECK(read_latest(root) == 20);
  const CheckpointCheck check = check_checkpoint(root + "/step_00000020", true);
  REQUIRE(check.valid());
  const CheckpointManifest& manifest = *check.manifest;
  CHECK(manifest.step == 20);
  CHECK(manifest.samples_seen == 160);
  CHECK(manifest.tokens_seen == 5120);
  CHECK(manifest.total_parameters == 100);  // from the ranks' reports
  CHECK(manifest.data_positions["samples_consumed"] == 160);
  CHECK(manifest.scheduler["last_step"] == 20);
  CHECK(manifest.created_unix_ms == 2000);
  REQUIRE(manifest.shards.size() == 2);
  CHECK(manifest.shards[0].rank == 0);  // sorted by range
  CHECK(manifest.shards[1].begin == 48);
  std::ifstream spec(root + "/step_00000020/spec.yaml");
  CHECK(std::string((std::istreambuf_iterator<char>(spec)), {}) == "name: job\n");
}

TEST_CASE("keep applies after each commit") {
  const std::string root = fresh_folder("keep");
  CheckpointCommitter committer(settings(root, 2));
  for (const int64_t step : {10, 20, 30}) {
    committer.on_shard_written(0, shard_of(root, step, 0, 0, 50), step);
    const auto outcome = committer.on_shard_written(1, shard_of(root, step, 1, 50, 100), step);
    CHECK(outcome.committed);
    if (step == 30) CHECK(outcome.removed == std::vector<std::string>{root + "/step_00000010"});
  }
  CHECK(list_checkpoints(root, true).size() == 2);
}

TEST_CASE("reports that cannot be right are errors, and commit nothing") {
  const std::string root = fresh_folder("wrong");
  CheckpointCommitter committer(settings(root, 3));
  const v1::WorkerEvent shard = shard_of(root, 10, 0, 0, 50);
  CHECK(committer.on_shard_written(0, shard, 1).error.empty());
  CHECK_THAT(committer.on_shard_written(0, shard, 1).error,
             Catch::Contains("rank 0 reported its shard of step 10 twice"));
  CHECK_THAT(committer.on_shard_written(2, shard, 1).error, Catch::Contains("ranks 0-1"));
  v1::WorkerEvent outside = shard_of(root, 10, 1, 50, 100);
  outside.mutable_shards(0)->set_end(120);
  CHECK_THAT(committer.on_shard_written(1, outside, 1).error, Catch::Contains("outside"));
  CHECK_FALSE(fs::exists(root + "/step_00000010/manifest.json"));
}

TEST_CASE("a shard the controller cannot see is an error naming the shared filesystem") {
  const std::string root = fresh_folder("unseen");
  CheckpointCommitter committer(settings(root, 3));
  committer.on_shard_written(0, shard_of(root, 10, 0, 0, 50), 1);
  const v1::WorkerEvent other = shard_of(root, 10, 1, 50, 100);
  fs::remove(root + "/step_00000010/rank_1.bin");  // written on another host's local disk
  const auto outcome = committer.on_shard_written(1, other, 1);
  CHECK_FALSE(outcome.committed);
  CHECK_THAT(outcome.error, Catch::Contains("rank 1 reported its shard rank_1.bin") &&
                                Catch::Contains("filesystem every host shares"));
  CHECK_FALSE(fs::exists(root + "/step_00000010/manifest.json"));
  CHECK_FALSE(read_latest(root));
}

TEST_CASE("under tensor parallelism each tensor rank's slice is tiled by its own shards") {
  const std::string root = fresh_folder("tensor");
  CheckpointCommitter::Settings tensor_settings = settings(root, 3);
  tensor_settings.ranks = 4;
  tensor_settings.base.tensor_parallel = 2;  // 2 data x 2 tensor; slices of 60
  CheckpointCommitter committer(tensor_settings);
  // World rank = data * 2 + tensor.
  CHECK(committer.on_shard_written(3, shard_of(root, 10, 3, 30, 60, 1, 60), 1).error.empty());
  CHECK(committer.on_shard_written(0, shard_of(root, 10, 0, 0, 30, 0, 60), 1).error.empty());
  CHECK(committer.on_shard_written(2, shard_of(root, 10, 2, 30, 60, 0, 60), 1).error.empty());
  const auto last = committer.on_shard_written(1, shard_of(root, 10, 1, 0, 30, 1, 60), 1);
  INFO(last.error);
  REQUIRE(last.committed);
  const CheckpointCheck check = check_checkpoint(root + "/step_00000010", true);
  REQUIRE(check.valid());
  const CheckpointManifest& manifest = *check.manifest;
  CHECK(manifest.total_parameters == 100);  // the whole model's
  REQUIRE(manifest.shards.size() == 4);
  // Sorted by slice, then by range.
  const std::vector<int> ranks = {manifest.shards[0].rank, manifest.shards[1].rank,
                                  manifest.shards[2].rank, manifest.shards[3].rank};
  CHECK(ranks == std::vector<int>{0, 2, 1, 3});
  CHECK(manifest.shards[2].tensor_rank == 1);
  CHECK(manifest.shards[2].slice_parameters == 60);

  // A tensor rank outside the grid, and another model's report, are errors.
  CHECK_THAT(committer.on_shard_written(0, shard_of(root, 20, 0, 0, 30, 2, 60), 1).error,
             Catch::Contains("tensor rank 2 of stage 0, outside"));
  v1::WorkerEvent other_model = shard_of(root, 20, 1, 0, 30, 1, 60);
  other_model.mutable_shards(0)->set_model_parameters(99);
  CHECK_THAT(committer.on_shard_written(1, other_model, 1).error,
             Catch::Contains("is of a model of 99 parameters, the others' of 100"));
}

}  // namespace
}  // namespace dslaunch::controller
