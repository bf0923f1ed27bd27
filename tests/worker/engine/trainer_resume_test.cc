// Checkpoints from the trainer's side: a run resumed from one continues bit
// for bit, whatever the ZeRO stage, and a checkpoint written by N ranks at
// one stage resumes on fewer ranks at another stage (resharding) with the
// uninterrupted run's losses.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/shard_file.h"
#include "core/layout/model_config.h"
#include "core/layout/parameter_table.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "topology/process_grid.h"
#include "worker/comm/communicator.h"
#include "worker/comm/process_groups.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

using comm::testing::world_barrier;
using comm::testing::world_data;

namespace fs = std::filesystem;

struct Run {
  std::map<int64_t, double> losses;  // by step
  std::vector<float> params;
};

// Trains `spec` on `comm` with the global batch `global` split into micro
// batches of 2, writing every checkpoint (every spec.checkpoint.interval
// steps) as shards under `root`/step_<S>/rank_<r>.bin, from `resume` if set.
// With tensor and pipeline groups, every rank trains its slice and writes
// its own shard, named by its world rank.
Run train_checkpointed(comm::Communicator& comm, spec::JobSpec spec, int64_t global,
                       const std::string& root, std::optional<ResumePoint> resume = std::nullopt,
                       comm::Communicator* tensor = nullptr,
                       comm::Communicator* pipeline = nullptr) {
  const int size = comm.size();
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = global / (2 * size);
  spec.training.batch.train_batch_size = global;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  Run run;
  TrainerOptions options;
  options.data_comm = &comm;
  options.tensor_comm = tensor;
  options.pipeline_comm = pipeline;
  options.resume = std::move(resume);
  options.on_step = [&run](const StepReport& report) { run.losses[report.step] = report.loss; };
  options.save_checkpoint = [&root](const CheckpointSlice& slice) {
    testing::write_test_shard(root, slice, comm::testing::world_rank(),
                              comm::testing::world_size());
  };
  TrainResult result = train(spec, data, *backend, options);
  REQUIRE(result.error == "");
  REQUIRE(result.steps == spec.training.steps);
  run.params = std::move(result.params);
  REQUIRE_OK(comm.barrier()->wait());
  return run;
}

using testing::resume_point;

std::string file_bytes(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  REQUIRE(file);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

double worst_relative_difference(const Run& resumed, const Run& whole, int64_t from) {
  double worst = 0;
  for (const auto& [step, loss] : resumed.losses) {
    REQUIRE(step > from);
    worst =
        std::max(worst, std::abs(loss - whole.losses.at(step)) / std::abs(whole.losses.at(step)));
  }
  return worst;
}

TEST_CASE("a run resumed from a checkpoint continues bit for bit at every ZeRO stage") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  const int stage = GENERATE(0, 1, 2, 3);
  // With the optimizer's moments offloaded to a swap file (ZeRO 1-3), and
  // at stage 3 the parameters too, they are saved from it and resumed into it.
  const bool offload = stage > 0 ? GENERATE(false, true) : false;
  INFO("ZeRO stage " << stage << (offload ? ", offload_optimizer nvme" : ""));
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.zero.stage = stage;
  spec.training.zero.param_persistence_threshold = 0;
  spec.checkpoint.interval = 10;
  if (offload) {
    spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
    spec.training.zero.offload_optimizer.nvme_path = dir;
    spec.training.zero.sub_group_size = 5000;
    // At stage 3 the parameters go to NVMe too (ZeRO-Infinity).
    if (stage == 3) {
      spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
      spec.training.zero.offload_param.nvme_path = dir;
    }
  }
  const int size = world_data().size();
  const int64_t global = 4 * size;  // accumulation 2
  const std::string root = fmt::format("{}/stage{}{}", dir, stage, offload ? "-offload" : "");
  const Run whole = train_checkpointed(world_data(), spec, global, root);
  const Run resumed = train_checkpointed(world_data(), spec, global, root + "-resumed",
                                         resume_point(root, 20, spec.model, global));
  REQUIRE(resumed.losses.size() == 30);
  for (const auto& [step, loss] : resumed.losses) {
    INFO("step " << step);
    CHECK(loss == whole.losses.at(step));
  }
  CHECK(resumed.params == whole.params);
  // The resumed run's own checkpoints are the whole run's, byte for byte.
  if (rank == 0) {
    for (const char* file : {"step_50/rank_0.bin", "step_30/rank_0.bin"}) {
      INFO(file);
      CHECK(file_bytes(fs::path(root) / file) == file_bytes(fs::path(root + "-resumed") / file));
    }
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) fs::remove_all(dir);
}

TEST_CASE("a 16-bit run resumes bit for bit: masters, moments and the loss scaler") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  const bool fp16 = GENERATE(true, false);
  const int stage = GENERATE(1, 3);
  // At stage 3 everything on NVMe too: masters, moments and gradients.
  const bool optimizer_on_nvme = stage == 3 ? GENERATE(false, true) : false;
  INFO((fp16 ? "fp16" : "bf16") << ", ZeRO stage " << stage
                                << (optimizer_on_nvme ? ", offload_optimizer nvme" : ""));
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 20;
  spec.training.scheduler.total_num_steps = 20;
  spec.training.zero.stage = stage;
  spec.training.zero.param_persistence_threshold = 0;
  spec.checkpoint.interval = 10;
  if (stage == 3) {  // the 16-bit weights' partition on NVMe
    spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
    spec.training.zero.offload_param.nvme_path = dir;
  }
  if (optimizer_on_nvme) {
    spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
    spec.training.zero.offload_optimizer.nvme_path = dir;
    spec.training.zero.sub_group_size = 3000;
  }
  if (fp16) {
    // A scale far too large: the first steps overflow and are skipped, so
    // the checkpoint carries skipped steps, a shrunken scale and hysteresis.
    spec.training.fp16.enabled = true;
    spec.training.fp16.initial_scale_power = 32;
    spec.training.fp16.loss_scale_window = 4;
  } else {
    spec.training.bf16 = true;
  }
  const int64_t global = 4 * world_data().size();
  const std::string root = fmt::format("{}/{}-{}{}", dir, fp16 ? "fp16" : "bf16", stage,
                                       optimizer_on_nvme ? "-nvme" : "");
  const Run whole = train_checkpointed(world_data(), spec, global, root);
  std::string error;
  const auto header = core::read_shard_header(root + "/step_10/rank_0.bin", error);
  REQUIRE(header);
  CHECK(header->loss_scaler.has_value() == fp16);
  if (fp16) {
    CHECK(header->loss_scaler->skipped_steps > 0);
    CHECK(header->optimizer_step == 10 - header->loss_scaler->skipped_steps);
  }
  const Run resumed = train_checkpointed(world_data(), spec, global, root + "-resumed",
                                         resume_point(root, 10, spec.model, global));
  REQUIRE(resumed.losses.size() == 10);
  for (const auto& [step, loss] : resumed.losses) {
    INFO("step " << step);
    CHECK(loss == whole.losses.at(step));
  }
  CHECK(resumed.params == whole.params);
  if (rank == 0) {
    CHECK(file_bytes(fs::path(root) / "step_20/rank_0.bin") ==
          file_bytes(fs::path(root + "-resumed") / "step_20/rank_0.bin"));
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) fs::remove_all(dir);
}

TEST_CASE("a checkpoint of N ranks resumes on fewer ranks at another ZeRO stage") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  // 4 ranks at stage 2 go on as 2 at stage 3 (a lost node); 2 ranks at
  // stage 1 go on as 1 at stage 0.
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.zero.stage = size >= 4 ? 2 : 1;
  spec.checkpoint.interval = 10;
  const int64_t global = 2 * size;
  const std::string root = dir + "/wide";
  const Run whole = train_checkpointed(world_data(), spec, global, root);

  // The survivors, ranks [0, size / 2), are the data group of the first of
  // two pipeline stages (created on every rank: collective).
  comm::ProcessGroups& halves = comm::testing::groups_of({2, size / 2, 1});
  if (halves.coord().pipeline == 0) {
    comm::Communicator& survivors = halves.data();
    REQUIRE(survivors.world_ranks().front() == 0);
    REQUIRE(survivors.size() == size / 2);
    spec.training.zero.stage = size >= 4 ? 3 : 0;
    const Run resumed = train_checkpointed(survivors, spec, global, dir + "/narrow",
                                           resume_point(root, 20, spec.model, global));
    REQUIRE(resumed.losses.size() == 30);
    const double worst = worst_relative_difference(resumed, whole, 20);
    INFO("largest relative loss difference after resharding: " << worst);
    CHECK(worst < 1e-5);
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) fs::remove_all(dir);
}

// The tiny job with 4 blocks and 4 heads (split by 2 or 4 tensor ranks or
// pipeline stages), 30 steps checkpointed every 10. A vocabulary of 72 is
// padded to 72, 80 and 96 rows for 1, 2 and 4 tensor ranks (Megatron's
// multiple of 8 x tensor): the token embedding is read across paddings too.
spec::JobSpec layout_job(const std::string& dir) {
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.model.num_attention_heads = 4;
  spec.model.num_layers = 4;
  spec.model.vocab_size = 72;
  spec.checkpoint.interval = 10;
  spec.training.steps = 30;
  spec.training.scheduler.total_num_steps = 30;
  return spec;
}

// The resumed run's 10 steps after step 20 follow the uninterrupted run's
// losses within 1e-5, and its final weights (gathered into the one-rank
// layout) within 1e-5, key biases aside.
void check_continues(const Run& resumed, const Run& whole, const spec::ModelSpec& model) {
  REQUIRE(resumed.losses.size() == 10);
  const double worst = worst_relative_difference(resumed, whole, 20);
  INFO("largest relative loss difference after the move: " << worst);
  CHECK(worst < 1e-5);
  REQUIRE(resumed.params.size() == whole.params.size());
  const double largest = testing::param_difference(resumed.params, whole.params, model).learning;
  INFO("largest parameter difference: " << largest);
  CHECK(largest < 1e-5);
}

// Tensor- and pipeline-parallel checkpoints: every rank writes its slice's
// shard, and a checkpoint of one (pipeline, data, tensor) layout resumes
// under another with the uninterrupted run's losses.
TEST_CASE("a checkpoint resumes across tensor, pipeline and data layouts") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = layout_job(dir);
  const int64_t global = 8;
  struct Layout {
    int pipeline, data, tensor, zero_stage, virtual_stages;
  };
  // The world as pipeline x data x tensor, and the same ranks regrouped;
  // interleaved pipelines (virtual stages) hold other blocks per stage.
  const std::vector<std::pair<Layout, Layout>> moves =
      size >= 4 ? std::vector<std::pair<Layout, Layout>>{{{1, 2, 2, 1, 1}, {1, 1, 4, 0, 1}},
                                                         {{1, 4, 1, 2, 1}, {1, 2, 2, 3, 1}},
                                                         {{2, 1, 2, 0, 1}, {1, 4, 1, 1, 1}},
                                                         {{2, 2, 1, 1, 1}, {1, 2, 2, 2, 1}},
                                                         {{2, 1, 2, 1, 2}, {2, 2, 1, 0, 1}}}
                : std::vector<std::pair<Layout, Layout>>{{{1, 1, 2, 0, 1}, {1, 2, 1, 1, 1}},
                                                         {{1, 2, 1, 2, 1}, {1, 1, 2, 0, 1}},
                                                         {{2, 1, 1, 1, 1}, {1, 1, 2, 0, 1}},
                                                         {{2, 1, 1, 0, 2}, {2, 1, 1, 1, 1}},
                                                         {{1, 2, 1, 1, 1}, {2, 1, 1, 0, 2}}};
  int index = 0;
  for (const auto& [from, to] : moves) {
    INFO("pipeline " << from.pipeline << " (" << from.virtual_stages << " virtual) x data "
                     << from.data << " x tensor " << from.tensor << " (ZeRO " << from.zero_stage
                     << ") -> pipeline " << to.pipeline << " (" << to.virtual_stages
                     << " virtual) x data " << to.data << " x tensor " << to.tensor << " (ZeRO "
                     << to.zero_stage << ")");
    const std::string root = fmt::format("{}/layout{}", dir, index++);
    comm::ProcessGroups& before = comm::testing::groups_of({from.pipeline, from.data, from.tensor});
    spec.training.zero.stage = from.zero_stage;
    spec.parallelism.virtual_stages = from.virtual_stages;
    const Run whole = train_checkpointed(before.data(), spec, global, root, std::nullopt,
                                         &before.tensor(), &before.pipeline());
    REQUIRE_OK(world_barrier());
    comm::ProcessGroups& after = comm::testing::groups_of({to.pipeline, to.data, to.tensor});
    spec.training.zero.stage = to.zero_stage;
    spec.parallelism.virtual_stages = to.virtual_stages;
    const Run resumed = train_checkpointed(after.data(), spec, global, root + "-resumed",
                                           resume_point(root, 20, spec.model, global),
                                           &after.tensor(), &after.pipeline());
    check_continues(resumed, whole, spec.model);
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) fs::remove_all(dir);
}

// After losing half the ranks, the survivors (world ranks [0, size/2)) go
// on under another layout: tensor 2 x pipeline 2 becomes data 2, pipeline 2
// x data 2 becomes tensor 2.
TEST_CASE("a 3D checkpoint of 4 ranks resumes on 2 under another layout") {
  const int size = world_data().size();
  if (size < 4) return;
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  const spec::JobSpec spec = layout_job(dir);
  struct Move {
    topology::GridShape from;  // over the 4 ranks
    topology::GridShape to;    // over the first 2 (pipeline, data, tensor)
  };
  const Move moves[] = {{{2, 1, 2}, {1, 2, 1}}, {{2, 2, 1}, {1, 1, 2}}};
  int index = 0;
  for (const Move& move : moves) {
    INFO("pipeline " << move.from.pipeline << " x data " << move.from.data << " x tensor "
                     << move.from.tensor << " on 4 ranks -> pipeline " << move.to.pipeline
                     << " x data " << move.to.data << " x tensor " << move.to.tensor << " on 2");
    const std::string root = fmt::format("{}/shrink{}", dir, index++);
    comm::ProcessGroups& before = comm::testing::groups_of(move.from);
    const Run whole = train_checkpointed(before.data(), spec, 8, root, std::nullopt,
                                         &before.tensor(), &before.pipeline());
    REQUIRE_OK(world_barrier());
    // Groups over the survivors: the first half of a 2-stage pipeline of
    // the world is ranks [0, size/2); within it, the 2-rank layout wanted.
    comm::ProcessGroups& halves = comm::testing::groups_of(
        {2, move.to.data == 2 ? size / 2 : 1, move.to.tensor == 2 ? size / 2 : 1});
    if (halves.coord().pipeline == 0) {
      REQUIRE(halves.data().size() * halves.tensor().size() == 2);
      const Run resumed =
          train_checkpointed(halves.data(), spec, 8, root + "-resumed",
                             resume_point(root, 20, spec.model, 8), &halves.tensor(), nullptr);
      check_continues(resumed, whole, spec.model);
    }
    REQUIRE_OK(world_barrier());
  }
  if (rank == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
