// Data parallelism changes nothing but speed: with the same global batch,
// DP = N with one micro-batch per rank gives the loss of DP = 1 accumulating
// N micro-batches, at every step.
#include <unistd.h>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "launcher/plan/memory_estimate.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"

namespace dslaunch::worker::engine {
namespace {

using comm::testing::world_barrier;
using comm::testing::world_data;

// Every rank of `comm` ends with rank 0's `values`.
core::Status broadcast_from_rank0(comm::Communicator& comm, std::vector<float>& values) {
  return comm.broadcast(comm::buffer_of(values.data(), static_cast<int64_t>(values.size())), 0)
      ->wait();
}

struct Run {
  std::vector<double> losses;
  std::vector<double> eval_losses;
  std::vector<float> params;
};

Run train_on(comm::Communicator& comm, spec::JobSpec spec, int64_t micro, int64_t accumulation,
             MemoryReport* memory = nullptr) {
  const int size = comm.size();
  spec.training.batch.micro_batch_per_gpu = micro;
  spec.training.batch.gradient_accumulation_steps = accumulation;
  spec.training.batch.train_batch_size = micro * accumulation * size;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  Run run;
  TrainerOptions options;
  options.data_comm = &comm;
  options.on_memory = [memory](const MemoryReport& report) {
    if (memory != nullptr) *memory = report;
  };
  options.on_step = [&run](const StepReport& report) {
    run.losses.push_back(report.loss);
    if (report.eval_loss) run.eval_losses.push_back(*report.eval_loss);
  };
  TrainResult result = train(spec, data, *backend, options);
  REQUIRE(result.error == "");
  REQUIRE(result.steps == spec.training.steps);
  run.params = std::move(result.params);
  return run;
}

TEST_CASE("DP=N with accumulation 1 matches DP=1 accumulating N micro-batches, step by step") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  const spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  const int64_t micro = 2;

  // Created on every rank (collective), used by rank 0 alone.
  comm::Communicator& solo = comm::testing::solo_data_comm();
  const Run parallel = train_on(world_data(), spec, micro, 1);
  if (rank == 0) {
    const Run accumulated = train_on(solo, spec, micro, size);
    CHECK(parallel.losses.size() == 50);
    CHECK(accumulated.losses.size() == 50);
    double worst = 0;
    for (size_t step = 0; step < std::min(parallel.losses.size(), accumulated.losses.size());
         ++step) {
      const double relative = std::abs(parallel.losses[step] - accumulated.losses[step]) /
                              std::abs(accumulated.losses[step]);
      worst = std::max(worst, relative);
    }
    INFO("largest relative loss difference over 50 steps: " << worst);
    CHECK(worst < 1e-5);
    CHECK(parallel.eval_losses.size() == 5);
    CHECK(accumulated.eval_losses.size() == 5);
    for (size_t i = 0; i < std::min(parallel.eval_losses.size(), accumulated.eval_losses.size());
         ++i) {
      CHECK(parallel.eval_losses[i] == Approx(accumulated.eval_losses[i]).epsilon(1e-5));
    }
    // It learned: the structured data is far from uniform (ln 64 = 4.16).
    CHECK(accumulated.losses.back() < 0.85 * accumulated.losses.front());
    std::filesystem::remove_all(dir);
  }
  // Every rank of the data group ends with the same parameters.
  std::vector<float> rank0 = parallel.params;
  REQUIRE_OK(broadcast_from_rank0(world_data(), rank0));
  CHECK(rank0 == parallel.params);
}

// The largest relative difference between two runs' losses.
double worst_loss_difference(const Run& a, const Run& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  double worst = 0;
  for (size_t step = 0; step < a.losses.size(); ++step) {
    worst = std::max(worst, std::abs(a.losses[step] - b.losses[step]) / std::abs(b.losses[step]));
  }
  return worst;
}

// A sharded run against stage 0's: the loss at every step and every
// evaluation within 1e-5 relative, the final parameters within 1e-5, and the
// key biases within `key_bias_tolerance` (see testing::ParamDifference; 0 asks for the
// same bits).
void check_matches_stage0(const Run& sharded, const Run& stage0, const spec::ModelSpec& model,
                          double key_bias_tolerance) {
  CHECK(sharded.losses.size() == 50);
  const double worst_loss = worst_loss_difference(sharded, stage0);
  REQUIRE(sharded.params.size() == stage0.params.size());
  const testing::ParamDifference worst_param =
      testing::param_difference(sharded.params, stage0.params, model);
  INFO("largest relative loss difference over 50 steps: " << worst_loss);
  INFO("largest parameter difference: " << worst_param.learning << ", key biases "
                                        << worst_param.key_bias);
  CHECK(worst_loss < 1e-5);
  CHECK(worst_param.learning < 1e-5);
  CHECK(worst_param.key_bias <= key_bias_tolerance);
  REQUIRE(sharded.eval_losses.size() == stage0.eval_losses.size());
  for (size_t i = 0; i < stage0.eval_losses.size(); ++i) {
    CHECK(sharded.eval_losses[i] == Approx(stage0.eval_losses[i]).epsilon(1e-5));
  }
}

TEST_CASE("ZeRO stage 1 gives stage 0's loss at every step with 1/N of the optimizer states") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  MemoryReport stage0_memory;
  MemoryReport stage1_memory;
  const Run stage0 = train_on(world_data(), spec, 2, 1, &stage0_memory);
  spec.training.zero.stage = 1;
  const Run stage1 = train_on(world_data(), spec, 2, 1, &stage1_memory);
  // The same arithmetic on the same gradients: the key biases match too.
  check_matches_stage0(stage1, stage0, spec.model, 0);
  // 8 bytes of Adam state per parameter, split N ways (within the padding).
  const double parameters = static_cast<double>(stage0.params.size());
  CHECK(stage0_memory.optimizer_states == static_cast<int64_t>(8 * parameters));
  CHECK(static_cast<double>(stage1_memory.optimizer_states) ==
        Approx(8 * parameters / size).epsilon(0.05));
  CHECK(stage1_memory.gradients == stage0_memory.gradients);
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("ZeRO stage 2 gives stage 0's loss at every step with 1/N of the gradients") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  // Reduce-scatter after every micro-batch must sum to what one all-reduce
  // after the last gives.
  const int64_t accumulation = GENERATE(1, 2);
  INFO("gradient accumulation " << accumulation);
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  MemoryReport stage0_memory;
  MemoryReport stage2_memory;
  const Run stage0 = train_on(world_data(), spec, 2, accumulation, &stage0_memory);
  spec.training.zero.stage = 2;
  const Run stage2 = train_on(world_data(), spec, 2, accumulation, &stage2_memory);
  // Without accumulation the reducer sums every gradient in the same order
  // at both stages, to the same bits. With it, stage 2 adds each
  // micro-batch's mean over ranks where stage 0 sums each rank's
  // micro-batches first: the key biases' noise differs, staying near zero.
  check_matches_stage0(stage2, stage0, spec.model, accumulation == 1 ? 0 : 1e-4);
  // 4 bytes of gradient and 8 of Adam state per parameter, split N ways
  // (within the partitions' padding).
  const double parameters = static_cast<double>(stage0.params.size());
  CHECK(stage0_memory.gradients == static_cast<int64_t>(4 * parameters));
  CHECK(stage0_memory.gradient_workspace_peak == 0);
  CHECK(static_cast<double>(stage2_memory.gradients) ==
        Approx(4 * parameters / size).epsilon(0.05));
  CHECK(static_cast<double>(stage2_memory.optimizer_states) ==
        Approx(8 * parameters / size).epsilon(0.05));
  // Some of the workspace was resident during backward, never more than all
  // of it (whole pages).
  CHECK(stage2_memory.gradient_workspace_peak > 0);
  CHECK(stage2_memory.gradient_workspace_peak <= 4 * parameters + 4096);
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

// Floats in tensors with fewer than `threshold` elements: the ones ZeRO
// stage 3 keeps whole on every rank.
int64_t persistent_floats(const spec::ModelSpec& model, int64_t threshold) {
  const core::ParameterTable table(core::model_config(model, 1));
  int64_t floats = 0;
  for (const core::TensorInfo& t : table.tensors()) {
    if (t.numel < threshold) floats += t.numel;
  }
  return floats;
}

TEST_CASE("ZeRO stage 3 gives stage 0's loss at every step with 1/N of the parameters") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  const int64_t accumulation = GENERATE(1, 2);
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  // 0: every tensor partitioned; 4C + 1: biases and LayerNorms (at most 4C
  // elements) whole, the matrices and embeddings partitioned.
  const int64_t threshold = GENERATE_COPY(int64_t{0}, 4 * int64_t{spec.model.hidden_size} + 1);
  INFO("gradient accumulation " << accumulation << ", persistence threshold " << threshold);
  MemoryReport stage0_memory;
  MemoryReport stage3_memory;
  const Run stage0 = train_on(world_data(), spec, 2, accumulation, &stage0_memory);
  spec.training.zero.stage = 3;
  spec.training.zero.param_persistence_threshold = threshold;
  const Run stage3 = train_on(world_data(), spec, 2, accumulation, &stage3_memory);
  // On one rank the same bits. On several, as under stage 2 with
  // accumulation: the token embedding's gradient is reduced in two parts
  // (the tied output layer's early, the encoder's at the end), whose means
  // differ from the mean of their sum in the last bits, and the key biases'
  // rounding noise (their exact gradient is zero) differs with them.
  check_matches_stage0(stage3, stage0, spec.model, accumulation == 1 && size == 1 ? 0 : 1e-4);
  // 4 bytes per parameter split N ways, plus the persistent tensors whole;
  // gradients and Adam states as under stage 2.
  const double parameters = static_cast<double>(stage0.params.size());
  const double persistent = static_cast<double>(persistent_floats(spec.model, threshold));
  CHECK(stage0_memory.parameters == static_cast<int64_t>(4 * parameters));
  CHECK(stage0_memory.parameter_workspace_peak == 0);
  CHECK(static_cast<double>(stage3_memory.parameters) ==
        Approx(4 * parameters / size + 4 * persistent).epsilon(0.05));
  CHECK(static_cast<double>(stage3_memory.gradients) ==
        Approx(4 * parameters / size).epsilon(0.05));
  CHECK(static_cast<double>(stage3_memory.optimizer_states) ==
        Approx(8 * parameters / size).epsilon(0.05));
  CHECK(stage3_memory.parameter_workspace_peak > 0);
  // Every rank ends with the same whole parameters.
  std::vector<float> rank0 = stage3.params;
  REQUIRE_OK(broadcast_from_rank0(world_data(), rank0));
  CHECK(rank0 == stage3.params);
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("ZeRO stage 3 holds only the blocks in use of a deep model") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.model.num_layers = 8;
  spec.training.steps = 3;
  const Run stage0 = train_on(world_data(), spec, 2, 1);
  spec.training.zero.stage = 3;
  spec.training.zero.param_persistence_threshold = 0;
  // At most the embeddings and two of the eight blocks live at once: the
  // limit, not the timing of the gathers, bounds the peak.
  const int64_t C = spec.model.hidden_size;
  const int64_t block = 12 * C * C + 13 * C;
  const int64_t embeddings = 64 * C + spec.model.seq_length * C + 2 * C;
  spec.training.zero.max_live_parameters = embeddings + 2 * block;
  MemoryReport memory;
  const Run stage3 = train_on(world_data(), spec, 2, 1, &memory);
  CHECK(worst_loss_difference(stage3, stage0) < 1e-5);
  const double parameters = static_cast<double>(stage0.params.size());
  INFO("workspace peak " << memory.parameter_workspace_peak << " of " << 4 * parameters);
  CHECK(memory.parameter_workspace_peak > 0);
  CHECK(static_cast<double>(memory.parameter_workspace_peak) < 0.5 * 4 * parameters);
  if (rank == 0) {
    std::printf("stage 3, %d ranks, 8 layers: parameter workspace peak %lld of %.0f bytes\n", size,
                static_cast<long long>(memory.parameter_workspace_peak), 4 * parameters);
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("ZeRO stage 1's parameter all-gather gives the same results in buckets of any size") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 3;
  spec.training.zero.stage = 1;
  const Run whole = train_on(world_data(), spec, 2, 1);
  // 1 and 7: one float and 7/N floats of each partition per collective.
  for (const int64_t bucket : {1L, 7L, 1000L}) {
    INFO("allgather_bucket_size " << bucket);
    spec.training.zero.allgather_bucket_size = bucket;
    const Run bucketed = train_on(world_data(), spec, 2, 1);
    CHECK(bucketed.losses == whole.losses);
    CHECK(bucketed.params == whole.params);
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("ZeRO stage 3 prefetches within its bucket and keeps at most max_live_parameters") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.model.num_layers = 6;
  spec.model.hidden_size = 64;  // blocks of many pages, so page rounding matters little
  spec.training.steps = 4;
  const Run stage0 = train_on(world_data(), spec, 2, 1);
  const core::ParameterTable table(core::model_config(spec.model, 1));
  int64_t embeddings = 0;  // wte, wpe and ln_f: held for the whole pass
  int64_t block = 0;
  for (const core::TensorInfo& t : table.tensors()) (t.layer < 0 ? embeddings : block) += t.numel;
  block /= spec.model.num_layers;
  const int64_t whole = table.total();
  // Pages partly shared by two regions may stay resident after one is
  // released: one per region boundary.
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t boundary_pages = page * (spec.model.num_layers + 3);
  struct Limits {
    int64_t prefetch;
    int64_t max_live;
  };
  for (const Limits limits : {Limits{1, 1}, Limits{block, 1'000'000'000}, Limits{whole, whole},
                              Limits{whole, embeddings + 2 * block}}) {
    INFO("stage3_prefetch_bucket_size " << limits.prefetch << ", stage3_max_live_parameters "
                                        << limits.max_live << " (embeddings " << embeddings
                                        << ", block " << block << ", model " << whole << ")");
    spec.training.zero.stage = 3;
    spec.training.zero.param_persistence_threshold = 0;
    spec.training.zero.prefetch_bucket_size = limits.prefetch;
    spec.training.zero.max_live_parameters = limits.max_live;
    MemoryReport memory;
    const Run stage3 = train_on(world_data(), spec, 2, 1, &memory);
    CHECK(worst_loss_difference(stage3, stage0) < 1e-5);
    // The block needed now is gathered even past the limit: the embeddings
    // and one block are the least a pass step holds.
    const int64_t live = std::max(limits.max_live, embeddings + block);
    INFO("workspace peak " << memory.parameter_workspace_peak << " bytes");
    CHECK(memory.parameter_workspace_peak > 0);
    CHECK(memory.parameter_workspace_peak <= 4 * live + boundary_pages);
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("a stop seen by one rank only stops every rank after the same step") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 1;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  int64_t reported = 0;
  TrainerOptions options;
  options.data_comm = &world_data();
  options.on_step = [&reported](const StepReport& report) { reported = report.step; };
  // Only the last rank is asked, as when the controller's stop reaches the
  // ranks at different moments.
  const int size = world_data().size();
  options.stop_requested = [&] { return rank == size - 1 && reported >= 5; };
  const TrainResult result = train(spec, data, *backend, options);
  CHECK(result.error == "");
  CHECK(result.stopped);
  CHECK(result.steps == 6);
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

// The drill for one rank overflowing (testing.fault nan_gradient): its NaN
// gradients reach every rank through the reduction, at every ZeRO stage, and
// every rank fails that step with the same message; none waits for another.
// ZeRO-Infinity's optimizer offload: Adam's moments stream through a swap
// file in groups; only where they wait between steps changes, so every loss
// and parameter has the same bits, at every stage, whatever the groups and
// buffers; memory holds the buffers only.
// A swap folder that does not exist fails training before its first step,
// on every rank, naming the spec key and the folder.
void check_missing_folder_named(spec::JobSpec spec, const std::string& key) {
  spec.training.batch = {};
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 1;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  auto backend = kernels::make_cpu_backend(1);
  TrainerOptions options;
  options.data_comm = &world_data();
  const TrainResult missing = train(spec, data, *backend, options);
  CHECK(missing.steps == 0);
  CHECK_THAT(missing.error,
             Catch::Contains(key) && Catch::Contains("no-such-folder': No such file or directory"));
  REQUIRE_OK(world_barrier());
}

TEST_CASE("offload_optimizer nvme trains to the same bits as memory at ZeRO 1, 2 and 3") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 12;
  spec.training.scheduler.total_num_steps = 12;
  const std::string nvme = dir + "/nvme-" + std::to_string(rank);
  std::filesystem::create_directories(nvme);
  struct Case {
    int stage;
    int64_t sub_group_size;
    int buffer_count;
  };
  for (const Case& c : {Case{1, 4096, 4}, Case{2, 1000, 1}, Case{3, 30000, 2}, Case{1, 1 << 30, 4}}) {
    INFO("ZeRO " << c.stage << ", sub_group_size " << c.sub_group_size << ", buffer_count "
                 << c.buffer_count);
    spec.training.zero.stage = c.stage;
    spec.training.zero.offload_optimizer = {};
    MemoryReport in_memory_report;
    const Run in_memory = train_on(world_data(), spec, 2, 2, &in_memory_report);
    spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
    spec.training.zero.offload_optimizer.nvme_path = nvme;
    spec.training.zero.offload_optimizer.buffer_count = c.buffer_count;
    spec.training.zero.sub_group_size = c.sub_group_size;
    MemoryReport offloaded_report;
    const Run offloaded = train_on(world_data(), spec, 2, 2, &offloaded_report);
    CHECK(offloaded.losses == in_memory.losses);
    CHECK(offloaded.eval_losses == in_memory.eval_losses);
    CHECK(offloaded.params == in_memory.params);
    // The buffers: buffer_count groups of both moments (4 KiB-aligned), or
    // fewer when the partition has fewer groups.
    const int64_t partition = in_memory_report.optimizer_states / 8;
    const int64_t group = std::min<int64_t>(c.sub_group_size, partition);
    const int64_t groups = (partition + group - 1) / group;
    const int64_t group_bytes = (group * 4 + 4095) / 4096 * 4096;
    CHECK(offloaded_report.optimizer_states ==
          std::min<int64_t>(c.buffer_count, groups) * 2 * group_bytes);
    // As `dslaunch plan` estimates them (its partitions are not aligned).
    const int64_t psi = static_cast<int64_t>(in_memory.params.size());
    CHECK(static_cast<double>(offloaded_report.optimizer_states) ==
          Approx(static_cast<double>(
                     plan::model_state_bytes(psi, spec.training, world_data().size()).swap_buffers))
              .epsilon(0.02));
    // Partitioned gradients go to a swap file of their own, as planned.
    if (c.stage >= 2) {
      CHECK(plan::model_state_bytes(psi, spec.training, world_data().size()).gradients == 0);
    }
    // The swap files are gone from the folder (unlinked at once).
    CHECK(std::filesystem::is_empty(nvme));
    REQUIRE_OK(world_barrier());
  }
  spec.training.zero.offload_optimizer.nvme_path = dir + "/no-such-folder";
  check_missing_folder_named(spec, "zero_optimization.offload_optimizer.nvme_path");
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("offload_param nvme trains to the same bits as memory at ZeRO 3, fp32 and bf16") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 20;
  spec.training.scheduler.total_num_steps = 20;
  spec.training.eval_interval = 5;  // evaluation gathers block by block too
  spec.training.zero.stage = 3;
  const std::string nvme = dir + "/nvme-" + std::to_string(rank);
  std::filesystem::create_directories(nvme);
  for (const bool bf16 : {false, true}) {
    for (const int64_t persistence : {int64_t{0}, int64_t{100}}) {
      for (const bool optimizer_too : {false, true}) {
        INFO((bf16 ? "bf16" : "fp32") << ", persistence threshold " << persistence
                                      << (optimizer_too ? ", optimizer on NVMe too" : ""));
        spec.training.bf16 = bf16;
        spec.training.zero.param_persistence_threshold = persistence;
        spec.training.zero.offload_param = {};
        spec.training.zero.offload_optimizer = {};
        MemoryReport in_memory_report;
        const Run in_memory = train_on(world_data(), spec, 2, 2, &in_memory_report);
        spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
        spec.training.zero.offload_param.nvme_path = nvme;
        if (optimizer_too) {
          spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
          spec.training.zero.offload_optimizer.nvme_path = nvme;
          spec.training.zero.sub_group_size = 3000;
        }
        MemoryReport offloaded_report;
        const Run offloaded = train_on(world_data(), spec, 2, 2, &offloaded_report);
        CHECK(offloaded.losses == in_memory.losses);
        CHECK(offloaded.eval_losses == in_memory.eval_losses);
        CHECK(offloaded.params == in_memory.params);
        // The partition left memory: only the persistent tensors' copy stays.
        CHECK(offloaded_report.parameters < in_memory_report.parameters);
        if (persistence == 0) CHECK(offloaded_report.parameters == 0);
        CHECK(std::filesystem::is_empty(nvme));
        REQUIRE_OK(world_barrier());
      }
    }
  }
  spec.training.zero.offload_optimizer = {};
  spec.training.zero.offload_param.nvme_path = dir + "/no-such-folder";
  check_missing_folder_named(spec, "zero_optimization.offload_param.nvme_path");
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("NaN gradients on one rank fail the step on every rank, at every ZeRO stage") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  for (const int stage : {0, 1, 2, 3}) {
    INFO("ZeRO stage " << stage);
    spec.training.zero.stage = stage;
    int64_t reported = 0;
    TrainerOptions options;
    options.data_comm = &world_data();
    options.on_step = [&reported](const StepReport& report) { reported = report.step; };
    options.poison_gradients = [rank, size](int64_t step) { return rank == size - 1 && step == 3; };
    const TrainResult result = train(spec, data, *backend, options);
    CHECK(reported == 2);
    CHECK(result.steps == 2);
    CHECK_THAT(result.error, Catch::StartsWith("step 3: the gradient norm is not finite (loss ") &&
                                 Catch::Contains("gradient norm nan"));
    REQUIRE_OK(world_barrier());
  }
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
