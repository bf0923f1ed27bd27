// ZeRO's working buffers measured by the trainer are what `dslaunch plan`
// estimates for them (launcher/plan/workspace_estimate.h): the gradient
// reducer's buffers to the byte, the gradient and gathered-parameter
// workspaces within their bounds.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/layout/parameter_table.h"
#include "core/layout/zero3_regions.h"
#include "kernels/backend.h"
#include "launcher/plan/memory_estimate.h"
#include "launcher/plan/workspace_estimate.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"
#include "worker/parallel/device_gradient_reducer.h"
#include "worker/parallel/gradient_reducer.h"

namespace dslaunch::worker::engine {
namespace {

using comm::testing::world_barrier;
using comm::testing::world_data;

static_assert(plan::kGradientBucketsInFlight == GradientReducer::kBucketsInFlight);
static_assert(plan::kGradientBucketsInFlight == DeviceGradientReducer::kBucketsInFlight);

constexpr int64_t kMicroBatch = 2;
// Page rounding at the edges of what is written and released.
constexpr int64_t kPageSlack = 16 * 4096;

MemoryReport measure(spec::JobSpec spec) {
  const int size = world_data().size();
  spec.training.batch.micro_batch_per_gpu = kMicroBatch;
  spec.training.batch.gradient_accumulation_steps = 1;
  spec.training.batch.train_batch_size = kMicroBatch * size;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  MemoryReport memory;
  TrainerOptions options;
  options.data_comm = &world_data();
  options.on_memory = [&memory](const MemoryReport& report) { memory = report; };
  const TrainResult result = train(spec, data, *backend, options);
  REQUIRE(result.error == "");
  return memory;
}

// Blocks of 3.2 MB, a token embedding of 4.2 MB in 8 vocabulary chunks:
// large against pages, small enough to run in seconds.
spec::JobSpec workspace_job(const std::string& dir) {
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.model.num_layers = 4;
  spec.model.hidden_size = 256;
  spec.model.num_attention_heads = 4;
  spec.model.vocab_size = 4096;
  spec.model.seq_length = 32;
  spec.training.steps = 3;
  spec.training.eval_interval = 0;
  spec.training.zero.param_persistence_threshold = 0;
  return spec;
}

struct Case {
  const char* name;
  int stage;
  int64_t bucket;
  int64_t max_live = 1'000'000'000;
  int64_t prefetch = 50'000'000;
  int64_t persistence = 0;
  spec::CommunicationDataType wire = spec::CommunicationDataType::kDefault;
  bool quantized_gradients = false;
  int hpz = 1;
  bool param_nvme = false;
};

TEST_CASE("ZeRO's workspaces and communication buffers are what the plan estimates") {
  const int rank = world_data().rank();
  const int data = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  const std::string nvme = dir + "/nvme-" + std::to_string(rank);
  std::filesystem::create_directories(nvme);
  spec::JobSpec spec = workspace_job(dir);
  const core::ParameterTable table = plan::stage_parameter_table(spec.model, spec.parallelism, 0);
  int64_t block = 0;
  for (int layer = 0; layer < spec.model.num_layers; ++layer) {
    block = std::max(block, table.layer_range(layer).second - table.layer_range(layer).first);
  }
  const int64_t wte = table.tensor(core::TensorRole::kWte).numel;

  using Wire = spec::CommunicationDataType;
  for (const Case& c : {
           Case{.name = "stage 2, one bucket", .stage = 2, .bucket = int64_t{1} << 30},
           Case{.name = "stage 2, small buckets", .stage = 2, .bucket = 50'000},
           Case{.name = "stage 2, small buckets, bf16 traffic",
           .stage = 2,
           .bucket = 50'000,
           .wire = Wire::kBf16},
           Case{.name = "stage 3, one bucket", .stage = 3, .bucket = int64_t{1} << 30},
           Case{.name = "stage 3, nothing prefetched", .stage = 3, .bucket = 50'000, .max_live = 1},
           Case{.name = "stage 3, the next block prefetched",
           .stage = 3,
           .bucket = 50'000,
           .prefetch = 0},
           Case{.name = "stage 3, every block prefetched", .stage = 3, .bucket = 50'000},
           Case{.name = "stage 3, a live limit of two blocks",
                .stage = 3,
                .bucket = 50'000,
                .max_live = 1'700'000},
           Case{.name = "stage 3, persistent small tensors",
           .stage = 3,
           .bucket = 50'000,
           .persistence = 100'000},
           Case{.name = "stage 3, quantized gradients, hpZ",
           .stage = 3,
           .bucket = 80'000,
           .quantized_gradients = true,
           .hpz = 2},
           Case{.name = "stage 3, fp16 traffic, parameters on NVMe",
           .stage = 3,
           .bucket = 50'000,
           .max_live = 1,
           .wire = Wire::kFp16,
           .param_nvme = true},
       }) {
    INFO(c.name);
    spec.training.zero.stage = c.stage;
    spec.training.zero.reduce_bucket_size = c.bucket;
    spec.training.zero.max_live_parameters = c.max_live;
    spec.training.zero.prefetch_bucket_size = c.prefetch;
    spec.training.zero.param_persistence_threshold = c.persistence;
    spec.training.communication_data_type = c.wire;
    spec.training.zero.quantized_gradients = c.quantized_gradients;
    spec.training.zero.hpz_partition_size = c.hpz;
    spec.training.zero.offload_param = {};
    if (c.param_nvme) {
      spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
      spec.training.zero.offload_param.nvme_path = nvme;
    }
    const MemoryReport measured = measure(spec);
    const plan::WorkspaceBytes planned = plan::workspace_bytes_per_rank(
        spec.model, spec.parallelism, spec.training, data, kMicroBatch, 0);
    INFO("communication: measured " << measured.communication_buffers << ", planned "
                                    << planned.communication);
    INFO("gradient workspace: measured " << measured.gradient_workspace_peak << ", planned "
                                         << planned.gradient_workspace);
    INFO("parameter workspace: measured " << measured.parameter_workspace_peak << ", planned "
                                          << planned.parameter_workspace);
    // The buffers, within the reducer's tables of buckets and the floats
    // by which ZeRO's partitions round.
    CHECK(std::abs(measured.communication_buffers - planned.communication) <= 64 * 1024);

    // The gradient workspace: never above the bound; at least a whole
    // block (and at stage 2 the token embedding) when its buckets are
    // released, which the bound exceeds by the buckets that may wait (and
    // at stage 3 a page where each two pieces of the output layer's 8
    // vocabulary chunks met).
    const int64_t bucket = std::min(c.bucket, table.total());
    const int64_t piece_edges =
        c.stage == 3 ? 8 * ((wte / 8 + bucket - 1) / bucket + 1) * 4096 : 0;
    CHECK(measured.gradient_workspace_peak <= planned.gradient_workspace + kPageSlack);
    CHECK(measured.gradient_workspace_peak >= 4 * (block + (c.stage == 2 ? wte : 0)) - kPageSlack);
    CHECK(planned.gradient_workspace - 4 * (block + (c.stage == 2 ? wte : 0)) <=
          4 * (plan::kGradientBucketsInFlight + 1) * bucket + piece_edges);

    if (c.stage < 3) {
      CHECK(measured.parameter_workspace_peak == 0);
      CHECK(planned.parameter_workspace == 0);
      continue;
    }
    // The gathered parameters: never above the bound; with nothing
    // prefetched, the bound exactly.
    CHECK(measured.parameter_workspace_peak <= planned.parameter_workspace + kPageSlack);
    const core::Zero3Regions regions(table, c.persistence);
    const int64_t needed =
        regions.persistent_floats() + regions.region_size(0) + regions.region_size(1);
    CHECK(measured.parameter_workspace_peak >= 4 * needed - kPageSlack);
    if (c.max_live == 1) {
      CHECK(measured.parameter_workspace_peak >= planned.parameter_workspace - kPageSlack);
    }
    REQUIRE_OK(world_barrier());
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
