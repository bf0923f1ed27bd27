// Checkpoint slices written in place: what a slice marked in_place points
// into keeps the values it had at the save until the trainer's
// before_update, at every ZeRO stage, with the whole-model optimizers and
// under tensor and pipeline parallelism; state in swap files streams and is
// never in place.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

using comm::testing::groups_of;
using comm::testing::world_barrier;
using comm::testing::world_data;
using comm::testing::world_size;

// A slice's bytes at the time of its save, and where they were.
struct Held {
  std::vector<std::vector<char>> bytes;
  std::vector<const void*> where;
};

struct Watch {
  int saves = 0;
  int in_place = 0;
  int fences = 0;
  std::vector<Held> pending;  // in-place slices not yet fenced
  int64_t changed = 0;        // arrays found changed at a fence
  int pending_at_final_weights = -1;
};

std::vector<char> bytes_of(const void* data, int64_t bytes) {
  const auto* from = static_cast<const char*>(data);
  return std::vector<char>(from, from + bytes);
}

// Trains on `groups`' grid (their data, tensor and pipeline groups).
void watch_training(spec::JobSpec spec, comm::ProcessGroups& groups, Watch& watch) {
  const int size = groups.data().size();
  // Two sequences a step per data rank: one micro-batch, or one per stage
  // under pipeline parallelism, which needs as many as it has stages.
  const int64_t micro_batches = spec.parallelism.pipeline;
  spec.training.batch.micro_batch_per_gpu = 2 / micro_batches;
  spec.training.batch.gradient_accumulation_steps = micro_batches;
  spec.training.batch.train_batch_size = 2 * size;
  spec.training.steps = 6;
  spec.training.scheduler.total_num_steps = 6;
  spec.checkpoint.interval = 2;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  TrainerOptions options;
  options.data_comm = &groups.data();
  options.tensor_comm = &groups.tensor();
  options.pipeline_comm = &groups.pipeline();
  options.save_checkpoint = [&watch](const CheckpointSlice& slice) {
    ++watch.saves;
    if (!slice.in_place) {
      for (const core::ShardArrayData& array : slice.arrays) CHECK(array.read);
      return;
    }
    ++watch.in_place;
    Held held;
    const int64_t count = slice.end - slice.begin;
    for (const core::ShardArrayData& array : slice.arrays) {
      REQUIRE_FALSE(array.read);
      held.bytes.push_back(bytes_of(array.data, count * core::dtype_bytes(array.info.dtype)));
      held.where.push_back(array.data);
    }
    if (slice.rank_state) {
      for (size_t i = 0; i < slice.rank_arrays.size(); ++i) {
        const core::RankStateArray& info = slice.rank_state->arrays[i];
        held.bytes.push_back(
            bytes_of(slice.rank_arrays[i], info.count * core::dtype_bytes(info.dtype)));
        held.where.push_back(slice.rank_arrays[i]);
      }
    }
    watch.pending.push_back(std::move(held));
  };
  options.before_update = [&watch] {
    ++watch.fences;
    for (const Held& held : watch.pending) {
      for (size_t i = 0; i < held.bytes.size(); ++i) {
        if (std::memcmp(held.where[i], held.bytes[i].data(), held.bytes[i].size()) != 0) {
          ++watch.changed;
        }
      }
    }
    watch.pending.clear();
  };
  // The final parameters may be taken from the buffers the last checkpoint
  // points into: it is fenced by then.
  options.write_final_weights = [&watch](const core::ParameterReader&) {
    watch.pending_at_final_weights = static_cast<int>(watch.pending.size());
    return core::Status();
  };
  const TrainResult result = train(spec, data, *backend, options);
  REQUIRE(result.error == "");
  REQUIRE(result.steps == 6);
}

struct Case {
  std::string name;
  int stage;
  bool bf16;
  spec::OptimizerType optimizer;
  bool offload_optimizer;
  int tensor = 1;    // tensor-parallel ranks: 1 or 2
  int pipeline = 1;  // pipeline stages: 1 or 2
};

TEST_CASE("an in-place checkpoint slice keeps its values until before_update") {
  const std::string dir = testing::shared_token_files(world_data());
  const std::string nvme = dir + "/nvme-" + std::to_string(world_data().rank());
  std::filesystem::create_directories(nvme);
  using O = spec::OptimizerType;
  std::vector<Case> cases = {
      {"ZeRO 0", 0, false, O::kAdamW, false},
      {"ZeRO 1 bf16", 1, true, O::kAdamW, false},
      {"ZeRO 2", 2, false, O::kAdamW, false},
      {"ZeRO 3", 3, false, O::kAdamW, false},
      {"ZeRO 3 bf16", 3, true, O::kAdamW, false},
      {"LAMB", 0, false, O::kLamb, false},
      {"1-bit Adam", 0, false, O::kOneBitAdam, false},
      {"ZeRO 2, offload_optimizer nvme", 2, false, O::kAdamW, true},
  };
  // Where the final parameters are gathered from slices of the model (the
  // tiny model's 2 heads and 2 blocks split in two; the rest of the world
  // is the data group).
  if (world_size() % 2 == 0) {
    cases.push_back({"tensor parallel 2, ZeRO 3", 3, false, O::kAdamW, false, 2, 1});
    cases.push_back({"tensor parallel 2, bf16", 1, true, O::kAdamW, false, 2, 1});
    cases.push_back({"2 pipeline stages, ZeRO 1", 1, false, O::kAdamW, false, 1, 2});
  }
  for (const Case& c : cases) {
    INFO(c.name << " on " << world_size() << " rank(s)");
    spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
    spec.training.zero.stage = c.stage;
    spec.training.bf16 = c.bf16;
    spec.training.optimizer.type = c.optimizer;
    spec.parallelism.tensor = c.tensor;
    spec.parallelism.pipeline = c.pipeline;
    if (c.optimizer == O::kOneBitAdam) spec.training.optimizer.freeze_step = 2;
    if (c.offload_optimizer) {
      spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
      spec.training.zero.offload_optimizer.nvme_path = nvme;
    }
    Watch watch;
    watch_training(spec, groups_of({c.pipeline, world_size() / (c.tensor * c.pipeline), c.tensor}),
                   watch);
    CHECK(watch.saves == 3);
    CHECK(watch.in_place == (c.offload_optimizer ? 0 : 3));
    // Before each of the 6 optimizer steps, after the last step, and once
    // more as train() ends.
    CHECK(watch.fences == 8);
    CHECK(watch.pending_at_final_weights == 0);
    CHECK(watch.pending.empty());
    CHECK(watch.changed == 0);
  }
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
