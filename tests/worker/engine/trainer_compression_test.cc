// The compressed optimizers (1-bit Adam, 0/1 Adam, 1-bit LAMB) in the
// training loop: after warm-up they send a small fraction of Adam's bytes,
// train about as well as the optimizer they compress, leave every rank the
// same weights, and resume from checkpoints of the compressed phase bit for
// bit, their error feedback included.
#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
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
#include "worker/comm/communicator.h"
#include "worker/comm/process_groups.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

using comm::testing::solo_data_comm;
using comm::testing::world_barrier;
using comm::testing::world_data;
using comm::testing::world_groups;

namespace fs = std::filesystem;

struct Run {
  std::map<int64_t, StepReport> steps;
  std::vector<float> params;
  std::vector<std::string> notices;
  double final_eval() const { return *steps.rbegin()->second.eval_loss; }
};

// Trains `spec` on `comm` with a global batch of 8 (micro-batches of 2),
// writing every checkpoint under `root` (when not empty) as the worker does,
// rank state included; from `resume` if set; on `threads` compute threads.
Run train_run(comm::Communicator& comm, spec::JobSpec spec, const std::string& root = "",
              std::optional<ResumePoint> resume = std::nullopt, int threads = 1) {
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 8 / (2 * comm.size());
  spec.training.batch.train_batch_size = 8;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(threads);
  Run run;
  TrainerOptions options;
  options.data_comm = &comm;
  options.transport = &world_groups().transport();
  options.resume = std::move(resume);
  options.on_step = [&run](const StepReport& report) { run.steps[report.step] = report; };
  options.on_notice = [&run](const std::string& notice) { run.notices.push_back(notice); };
  if (!root.empty()) {
    options.save_checkpoint = [&root, &comm](const CheckpointSlice& slice) {
      testing::write_test_shard(root, slice, comm.rank(), comm.size());
    };
  }
  TrainResult result = train(spec, data, *backend, options);
  REQUIRE(result.error == "");
  REQUIRE(result.steps == spec.training.steps);
  run.params = std::move(result.params);
  return run;
}

// The checkpoint of `step` of these runs (a global batch of 8).
ResumePoint resume_point(const std::string& root, int64_t step, const spec::ModelSpec& model) {
  return testing::resume_point(root, step, model, 8);
}

// The tiny job with `type`, its warm-up over after step 10.
spec::JobSpec compressed_job(const std::string& dir, spec::OptimizerType type) {
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.zero.stage = 0;
  spec::OptimizerSpec& optimizer = spec.training.optimizer;
  optimizer.type = type;
  optimizer.freeze_step = 10;
  optimizer.var_freeze_step = 10;
  optimizer.var_update_scaler = 2;
  optimizer.local_step_scaler = 4;
  optimizer.local_step_clipper = 4;
  if (type == spec::OptimizerType::kLamb || type == spec::OptimizerType::kOneBitLamb) {
    optimizer.lr = 1e-2;
  }
  return spec;
}

const char* name_of(spec::OptimizerType type) {
  switch (type) {
    case spec::OptimizerType::kOneBitAdam:
      return "OneBitAdam";
    case spec::OptimizerType::kZeroOneAdam:
      return "ZeroOneAdam";
    case spec::OptimizerType::kOneBitLamb:
      return "OneBitLamb";
    case spec::OptimizerType::kLamb:
      return "Lamb";
    default:
      return "AdamW";
  }
}

// Every rank's `values` equal rank 0's, bit for bit.
bool same_on_every_rank(comm::Communicator& comm, std::vector<float> values) {
  std::vector<float> first = values;
  REQUIRE_OK(
      comm.broadcast(comm::buffer_of(first.data(), static_cast<int64_t>(first.size())), 0)->wait());
  double same = first == values ? 1.0 : 0.0;
  double all = 0;
  REQUIRE_OK(
      comm.all_reduce(comm::buffer_of(&same, 1), comm::buffer_of(&all, 1), comm::ReduceOp::kMin)
          ->wait());
  return all == 1.0;
}

TEST_CASE("after warm-up the compressed optimizers send under 1/20 of the bytes and train alike") {
  const std::string dir = testing::shared_token_files(world_data());
  const auto [type, reference] =
      GENERATE(std::pair{spec::OptimizerType::kOneBitAdam, spec::OptimizerType::kAdamW},
               std::pair{spec::OptimizerType::kZeroOneAdam, spec::OptimizerType::kAdamW},
               std::pair{spec::OptimizerType::kOneBitLamb, spec::OptimizerType::kLamb});
  INFO(name_of(type) << " against " << name_of(reference));
  spec::JobSpec reference_spec = compressed_job(dir, reference);
  const Run full = train_run(world_data(), reference_spec);
  const Run compressed = train_run(world_data(), compressed_job(dir, type));
  // Adam's steps all-reduce the fp32 gradients (and a few scalars).
  int64_t full_bytes = 0;
  for (const auto& [step, report] : full.steps) {
    full_bytes = std::max(full_bytes, report.data_comm_bytes);
    CHECK_FALSE(report.compression_ratio);
  }
  const int64_t gradients =
      core::ParameterTable(core::model_config(reference_spec.model, 1)).total();
  CHECK(full_bytes >=
        comm::wire_bytes(comm::OpKind::kAllReduce, 4 * gradients, world_data().size()));
  int compressed_steps = 0;
  for (const auto& [step, report] : compressed.steps) {
    INFO("step " << step);
    // 1-bit Adam and LAMB warm up at full precision; 0/1 Adam compresses
    // the gradients of the steps between its variance updates from step 3.
    if (step <= 10 && type != spec::OptimizerType::kZeroOneAdam) {
      CHECK_FALSE(report.compression_ratio);
      continue;
    }
    if (step <= 10 && !report.compression_ratio) continue;  // 0/1 Adam's variance updates
    if (!report.compression_ratio) {
      // 0/1 Adam's local steps between synchronisations exchange no gradients.
      CHECK(type == spec::OptimizerType::kZeroOneAdam);
      CHECK(report.data_comm_bytes * 100 < full_bytes);
      continue;
    }
    ++compressed_steps;
    CHECK(report.data_comm_bytes * 20 <= full_bytes);
    CHECK(*report.compression_ratio >= 20);
  }
  CHECK(compressed_steps >= 10);
  // No worse than the optimizer it compresses by more than 5% (on this tiny
  // model 1-bit Adam, without Adam's bias correction, even does better).
  CHECK(compressed.final_eval() < 1.05 * full.final_eval());
  // Every rank holds the same weights: the compressed mean is the same bits
  // everywhere (0/1 Adam: those of the last synchronisation).
  CHECK(same_on_every_rank(world_data(), compressed.params));
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) fs::remove_all(dir);
}

TEST_CASE("the optimizers give the same bits on 1 and on 3 compute threads") {
  const std::string dir = testing::shared_token_files(world_data());
  const spec::OptimizerType type =
      GENERATE(spec::OptimizerType::kOneBitAdam, spec::OptimizerType::kZeroOneAdam,
               spec::OptimizerType::kOneBitLamb, spec::OptimizerType::kLamb);
  INFO(name_of(type));
  const spec::JobSpec spec = compressed_job(dir, type);
  const Run one = train_run(world_data(), spec, "", std::nullopt, 1);
  const Run three = train_run(world_data(), spec, "", std::nullopt, 3);
  REQUIRE(one.steps.size() == three.steps.size());
  for (const auto& [step, report] : one.steps) {
    INFO("step " << step);
    CHECK(three.steps.at(step).loss == report.loss);
  }
  CHECK(one.params == three.params);
}

TEST_CASE("a compressed-phase checkpoint resumes bit for bit, error feedback included") {
  const std::string dir = testing::shared_token_files(world_data());
  const spec::OptimizerType type =
      GENERATE(spec::OptimizerType::kOneBitAdam, spec::OptimizerType::kZeroOneAdam,
               spec::OptimizerType::kOneBitLamb, spec::OptimizerType::kLamb);
  INFO(name_of(type));
  spec::JobSpec spec = compressed_job(dir, type);
  // Checkpoints at 7, 14, 21, ...: 0/1 Adam's step 21 falls between two
  // synchronisations (its local interval is 4 by then).
  spec.checkpoint.interval = 7;
  const std::string root = fmt::format("{}/{}", dir, name_of(type));
  const Run whole = train_run(world_data(), spec, root);
  const Run resumed =
      train_run(world_data(), spec, root + "-resumed", resume_point(root, 21, spec.model));
  REQUIRE(resumed.steps.size() == 29);
  CHECK(resumed.notices.empty());
  for (const auto& [step, report] : resumed.steps) {
    INFO("step " << step);
    CHECK(report.loss == whole.steps.at(step).loss);
  }
  CHECK(resumed.params == whole.params);
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) fs::remove_all(dir);
}

TEST_CASE("resuming on another data-parallel size restarts the error feedback, with a notice") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = compressed_job(dir, spec::OptimizerType::kOneBitAdam);
  spec.checkpoint.interval = 20;
  const std::string root = dir + "/onebit";
  const Run whole = train_run(world_data(), spec, root);
  // Every process resumes alone: the same batch, on one rank.
  const Run resumed =
      train_run(solo_data_comm(), spec, fmt::format("{}-solo{}", root, world_data().rank()),
                resume_point(root, 20, spec.model));
  REQUIRE(resumed.notices.size() == 1);
  CHECK(resumed.notices[0] ==
        fmt::format("resuming OneBitAdam on 1 data-parallel ranks from a checkpoint of {}: the "
                    "error feedback of compressed communication starts again from zero",
                    world_data().size()));
  REQUIRE(resumed.steps.size() == 30);
  // Without compression on one rank, and with its errors restarted, it
  // goes on close to the run it left.
  CHECK(std::abs(resumed.final_eval() - whole.final_eval()) < 0.05 * whole.final_eval());
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) fs::remove_all(dir);
}

TEST_CASE(
    "an AdamW checkpoint resumes under 0/1 Adam (schedule from the step count), not 1-bit LAMB") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec adam = compressed_job(dir, spec::OptimizerType::kAdamW);
  adam.checkpoint.interval = 20;
  const std::string root = dir + "/adamw";
  train_run(world_data(), adam, root);
  // Past var_freeze_step (10): 0/1 Adam goes on frozen, from Adam's moments.
  const Run zero_one =
      train_run(world_data(), compressed_job(dir, spec::OptimizerType::kZeroOneAdam),
                root + "-zero-one", resume_point(root, 20, adam.model));
  REQUIRE(zero_one.notices.size() == 1);
  CHECK(zero_one.notices[0] ==
        "the checkpoint holds no ZeroOneAdam state: its error feedback starts from zero");
  REQUIRE(zero_one.steps.size() == 30);
  CHECK(std::isfinite(zero_one.final_eval()));
  // 1-bit LAMB needs its frozen trust ratios: refused, naming what is missing.
  spec::JobSpec lamb = compressed_job(dir, spec::OptimizerType::kOneBitLamb);
  lamb.training.batch.micro_batch_per_gpu = 2;
  lamb.training.batch.gradient_accumulation_steps = 8 / (2 * world_data().size());
  lamb.training.batch.train_batch_size = 8;
  const data::TrainingData data = data::open_training_data(lamb.data, lamb.model.seq_length, "");
  auto backend = kernels::make_cpu_backend(1);
  TrainerOptions options;
  options.data_comm = &world_data();
  options.resume = resume_point(root, 20, adam.model);
  const TrainResult refused = train(lamb, data, *backend, options);
  CHECK_THAT(refused.error, Catch::Contains("resuming from the checkpoint of step 20") &&
                                Catch::Contains("fresh_v"));
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) fs::remove_all(dir);
}

TEST_CASE("communication_data_type bf16 or fp16 halves the gradients' bytes of fp32 training") {
  // The tiny job's gradients are small enough for fp16 without scaling.
  const std::string dir = testing::shared_token_files(world_data());
  const int stage = GENERATE(0, 2);
  const spec::CommunicationDataType type =
      GENERATE(spec::CommunicationDataType::kBf16, spec::CommunicationDataType::kFp16);
  INFO("ZeRO stage " << stage
                     << (type == spec::CommunicationDataType::kBf16 ? ", bf16" : ", fp16"));
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.zero.stage = stage;
  const Run full = train_run(world_data(), spec);
  spec.training.communication_data_type = type;
  const Run narrow = train_run(world_data(), spec);
  for (const auto& [step, report] : narrow.steps) {
    INFO("step " << step);
    const int64_t fp32_bytes = full.steps.at(step).data_comm_bytes;
    // Stage 0 all-reduces gradients only; stage 2 reduce-scatters each
    // micro-batch's and all-gathers the fp32 parameters after the step (as
    // many bytes as one reduce-scatter).
    const double accumulation = 8.0 / (2 * world_data().size());
    const double expected = stage == 0 ? 0.5 : (0.5 * accumulation + 1) / (accumulation + 1);
    CHECK(report.data_comm_bytes < (expected + 0.05) * static_cast<double>(fp32_bytes));
    CHECK(report.data_comm_bytes > (expected - 0.05) * static_cast<double>(fp32_bytes));
  }
  CHECK(std::abs(narrow.final_eval() - full.final_eval()) < 0.01 * full.final_eval());
  CHECK(narrow.params != full.params);  // the rounding did happen
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) fs::remove_all(dir);
}

TEST_CASE(
    "ZeRO++ at stage 3: int8 weights and gradients take under 1/3 of the bytes, train alike") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.zero.stage = 3;
  spec.training.zero.param_persistence_threshold = 0;  // every tensor gathered
  const Run plain = train_run(world_data(), spec);
  spec.training.zero.quantized_weights = true;
  spec.training.zero.quantized_gradients = true;
  const Run zero_pp = train_run(world_data(), spec);
  for (const auto& [step, report] : zero_pp.steps) {
    INFO("step " << step);
    CHECK(report.data_comm_bytes * 3 <= plain.steps.at(step).data_comm_bytes);
  }
  CHECK(std::abs(zero_pp.final_eval() - plain.final_eval()) < 0.01 * plain.final_eval());
  CHECK(zero_pp.params != plain.params);
  CHECK(same_on_every_rank(world_data(), zero_pp.params));
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) fs::remove_all(dir);
}

TEST_CASE("ZeRO++'s hpZ gathers the backward pass within its group, to plain ZeRO 3's bits") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.zero.stage = 3;
  spec.training.zero.param_persistence_threshold = 0;
  const Run plain = train_run(world_data(), spec);
  spec.training.zero.hpz_partition_size = 2;
  const comm::Transport& transport = world_groups().transport();
  const int64_t group_bytes = transport.wire_bytes("data/parameters/hpz");
  const Run hpz = train_run(world_data(), spec);
  // Every backward pass gathered its blocks from the group's pieces.
  CHECK(transport.wire_bytes("data/parameters/hpz") - group_bytes > 0);
  for (const auto& [step, report] : hpz.steps) {
    INFO("step " << step);
    CHECK(report.loss == plain.steps.at(step).loss);
  }
  CHECK(hpz.params == plain.params);
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
