// 16-bit training: bf16 and fp16 against fp32, the ZeRO stages against each
// other, and fp16's loss scaler skipping overflowing steps on every rank.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/half_precision.h"
#include "launcher/plan/memory_estimate.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

using comm::testing::world_barrier;
using comm::testing::world_data;

enum class Precision { kFp32, kBf16, kFp16 };

void set_precision(spec::JobSpec& spec, Precision precision) {
  spec.training.bf16 = precision == Precision::kBf16;
  spec.training.fp16.enabled = precision == Precision::kFp16;
}

struct Run {
  std::vector<StepReport> reports;
  std::vector<float> params;
  // The parameters each checkpoint saved (the fp32 masters), by step.
  std::map<int64_t, std::vector<float>> saved;
  std::string error;
  int64_t steps = 0;
};

// Trains on the world with micro-batches of 2 and `accumulation` of them.
Run train_world(spec::JobSpec spec, int64_t accumulation, const TrainerOptions& extra = {}) {
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = accumulation;
  spec.training.batch.train_batch_size = 2 * accumulation * world_data().size();
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  Run run;
  TrainerOptions options = extra;
  options.data_comm = &world_data();
  options.on_step = [&run](const StepReport& report) { run.reports.push_back(report); };
  options.save_checkpoint = [&run](const CheckpointSlice& slice) {
    std::vector<float>& params = run.saved[slice.step];
    params.resize(slice.end - slice.begin);
    // Swapped parameters stream (a reader); the others are in memory.
    const core::ShardArrayData& saved = slice.arrays.front();
    if (saved.read) {
      CHECK(saved.read(0, slice.end - slice.begin, params.data()) == "");
    } else {
      const auto* values = static_cast<const float*>(saved.data);
      std::copy(values, values + (slice.end - slice.begin), params.begin());
    }
  };
  TrainResult result = train(spec, data, *backend, options);
  run.error = result.error;
  run.steps = result.steps;
  run.params = std::move(result.params);
  // The backend is back to fp32 products for whoever uses it next.
  CHECK(backend->matmul_kernel() == "OpenBLAS sgemm");
  return run;
}

std::vector<double> losses(const Run& run) {
  std::vector<double> out;
  for (const StepReport& report : run.reports) out.push_back(report.loss);
  return out;
}

double final_eval(const Run& run) {
  REQUIRE(run.reports.back().eval_loss);
  return *run.reports.back().eval_loss;
}

bool representable(const std::vector<float>& values, core::DType dtype) {
  for (float value : values) {
    const float rounded = dtype == core::DType::kBF16
                              ? kernels::bf16_to_float(kernels::float_to_bf16(value))
                              : kernels::fp16_to_float(kernels::float_to_fp16(value));
    if (std::memcmp(&rounded, &value, sizeof value) != 0) return false;
  }
  return true;
}

TEST_CASE("bf16 and fp16 train as well as fp32, on weights the 16-bit formats hold") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  const int64_t accumulation = 4 / world_data().size();
  const Run fp32 = train_world(spec, accumulation);
  REQUIRE(fp32.error == "");
  for (Precision precision : {Precision::kBf16, Precision::kFp16}) {
    const core::DType dtype =
        precision == Precision::kBf16 ? core::DType::kBF16 : core::DType::kF16;
    INFO(core::dtype_name(dtype));
    set_precision(spec, precision);
    const Run run = train_world(spec, accumulation);
    REQUIRE(run.error == "");
    REQUIRE(run.reports.size() == 50);
    // The model learned as much (the tiny model's losses fall from 4.2 to about 1).
    CHECK(final_eval(run) == Approx(final_eval(fp32)).epsilon(0.03));
    // And the 16-bit rounding is real: the losses are not fp32's.
    CHECK(losses(run) != losses(fp32));
    CHECK(run.reports.front().loss == Approx(fp32.reports.front().loss).epsilon(0.01));
    // The model's weights are 16-bit values; the checkpoint keeps the fp32
    // masters, which are not.
    CHECK(representable(run.params, dtype));
    REQUIRE(run.saved.count(50) == 1);
    CHECK_FALSE(representable(run.saved.at(50), dtype));
    for (const StepReport& report : run.reports) {
      CHECK(report.loss_scale.has_value() == (precision == Precision::kFp16));
      CHECK_FALSE(report.skipped);
    }
  }
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("16-bit training gives the same bits at every ZeRO stage") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 10;
  spec.training.scheduler.total_num_steps = 10;
  spec.training.zero.param_persistence_threshold = 0;
  for (Precision precision : {Precision::kBf16, Precision::kFp16}) {
    set_precision(spec, precision);
    spec.training.zero.stage = 0;
    const Run reference = train_world(spec, 1);
    REQUIRE(reference.error == "");
    for (int stage : {1, 2, 3}) {
      INFO((precision == Precision::kBf16 ? "bf16" : "fp16") << ", ZeRO stage " << stage);
      spec.training.zero.stage = stage;
      const Run run = train_world(spec, 1);
      REQUIRE(run.error == "");
      if (stage == 3 && world_data().size() > 1) {
        // Stage 3 reduces the token embedding's gradient in two parts (the
        // tied output layer's early): their means differ from the mean of
        // their sum in the last bits, which 16-bit weights pass on.
        REQUIRE(losses(run).size() == losses(reference).size());
        for (size_t i = 0; i < losses(run).size(); ++i) {
          CHECK(losses(run)[i] == Approx(losses(reference)[i]).epsilon(1e-4));
        }
        continue;
      }
      CHECK(losses(run) == losses(reference));
      CHECK(run.params == reference.params);
    }
  }
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) std::filesystem::remove_all(dir);
}

// The copy changes no result: on one rank, stage 3 with offload_param nvme
// (gathered weights, no copy) gives in-memory stage 3's bits (whole
// weights, a copy) in the test below. This one checks its bytes.
TEST_CASE("bf16 products keep a copy of whole weights, as the plan counts it") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 2;
  spec.training.scheduler.total_num_steps = 2;
  spec.cluster.device = spec::Device::kCpu;
  const bool kept = testing::bf16_weight_copy_kept();
  INFO("weight copy kept on this CPU: " << kept);
  const int64_t parameters = plan::parameters_per_rank(spec.model, spec.parallelism, 0);
  for (Precision precision : {Precision::kBf16, Precision::kFp16}) {
    set_precision(spec, precision);
    for (int stage : {0, 2, 3}) {
      INFO((precision == Precision::kBf16 ? "bf16" : "fp16") << ", ZeRO stage " << stage);
      spec.training.zero.stage = stage;
      MemoryReport memory;
      TrainerOptions options;
      options.on_memory = [&memory](const MemoryReport& report) { memory = report; };
      const Run run = train_world(spec, 1, options);
      REQUIRE(run.error == "");
      const int64_t planned =
          plan::model_state_bytes(parameters, spec.training, world_data().size(), spec.cluster.device)
              .weight_copy;
      // Stage 3 on one rank keeps its weights whole, and so the copy.
      const bool whole = stage < 3 || world_data().size() == 1;
      CHECK(planned == (precision == Precision::kBf16 && whole ? 2 * parameters : 0));
      CHECK(memory.weight_copy == (kept ? planned : 0));
    }
  }
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("offload_param nvme gives the same bits as in memory, on one rank too") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 10;
  spec.training.scheduler.total_num_steps = 10;
  spec.training.eval_interval = 5;
  spec.training.zero.stage = 3;
  spec.training.zero.param_persistence_threshold = 0;
  const std::string nvme = dir + "/nvme-" + std::to_string(rank);
  std::filesystem::create_directories(nvme);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    // Without accumulation: one rank in memory keeps whole gradients, and
    // adds micro-batches in another order than a partition does.
    set_precision(spec, precision);
    spec.training.zero.offload_param = {};
    const Run in_memory = train_world(spec, 1);
    REQUIRE(in_memory.error == "");
    spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
    spec.training.zero.offload_param.nvme_path = nvme;
    const Run offloaded = train_world(spec, 1);
    REQUIRE(offloaded.error == "");
    CHECK(losses(offloaded) == losses(in_memory));
    CHECK(final_eval(offloaded) == final_eval(in_memory));
    CHECK(offloaded.params == in_memory.params);
    CHECK(offloaded.saved.at(10) == in_memory.saved.at(10));
    CHECK(std::filesystem::is_empty(nvme));
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("fp16's loss scale grows by DeepSpeed's rule for the ZeRO stage, and is reported") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 12;
  set_precision(spec, Precision::kFp16);
  spec.training.fp16.initial_scale_power = 8;
  spec.training.fp16.loss_scale_window = 5;
  for (int stage : {0, 1}) {
    INFO("ZeRO stage " << stage);
    spec.training.zero.stage = stage;
    const Run run = train_world(spec, 1);
    REQUIRE(run.error == "");
    REQUIRE(run.reports.size() == 12);
    // Stage 0 (FP16_Optimizer) doubles after iterations 5 and 10, so steps
    // 7 and 12 are the first at the new scale; the ZeRO scaler one earlier.
    const int64_t first_doubled = stage == 0 ? 7 : 6;
    for (const StepReport& report : run.reports) {
      INFO("step " << report.step);
      const int doublings = report.step >= first_doubled + 5 ? 2 : report.step >= first_doubled;
      CHECK(*report.loss_scale == 256.0 * (1 << doublings));
      CHECK(report.skipped_steps == 0);
    }
  }
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("fp16 skips an overflowing step on every rank, holds the schedule and goes on") {
  const int rank = world_data().rank();
  const int size = world_data().size();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 8;
  spec.checkpoint.interval = 1;
  set_precision(spec, Precision::kFp16);
  spec.training.fp16.initial_scale_power = 10;
  spec.training.fp16.hysteresis = 2;
  for (int stage : {0, 2}) {
    INFO("ZeRO stage " << stage);
    spec.training.zero.stage = stage;
    TrainerOptions options;
    // The injected overflow: NaN in the last rank's gradients at step 3.
    options.poison_gradients = [rank, size](int64_t step) { return rank == size - 1 && step == 3; };
    const Run run = train_world(spec, 2, options);
    REQUIRE(run.error == "");
    REQUIRE(run.steps == 8);
    REQUIRE(run.reports.size() == 8);
    const StepReport& skipped = run.reports[2];
    CHECK(skipped.skipped);
    CHECK(skipped.skipped_steps == 1);
    CHECK(skipped.grad_norm == -1);
    CHECK(std::isfinite(skipped.loss));
    // No update: step 3's checkpoint holds step 2's parameters.
    CHECK(run.saved.at(3) == run.saved.at(2));
    CHECK(run.saved.at(4) != run.saved.at(3));
    // The learning rate schedule did not advance.
    CHECK(run.reports[3].lr == skipped.lr);
    // Stage 0 halves the scale at once; the ZeRO scaler's hysteresis of 2
    // absorbs the first overflow.
    CHECK(*run.reports[3].loss_scale == (stage == 0 ? 512.0 : 1024.0));
    for (size_t i = 3; i < run.reports.size(); ++i) CHECK_FALSE(run.reports[i].skipped);
    CHECK(run.reports.back().skipped_steps == 1);
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("a loss scale too large for fp16 shrinks by skipping steps until gradients fit") {
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 30;
  spec.training.scheduler.total_num_steps = 30;
  spec.checkpoint.interval = 1;
  set_precision(spec, Precision::kFp16);
  spec.training.fp16.initial_scale_power = 32;  // scaled gradients far past 65504
  spec.training.zero.stage = 1;
  const Run run = train_world(spec, 2);
  REQUIRE(run.error == "");
  REQUIRE(run.reports.size() == 30);
  // The first steps overflow (real fp16 overflow, nothing injected): each is
  // skipped and leaves the weights as they were, until the scale fits.
  int64_t skipped = 0;
  while (run.reports[skipped].skipped) ++skipped;
  CHECK(skipped >= 3);
  CHECK(run.saved.at(skipped) == run.saved.at(1));
  CHECK(*run.reports[skipped].loss_scale < std::ldexp(1.0, 32));
  CHECK(run.reports.back().skipped_steps >= skipped);
  CHECK(run.reports.back().loss < run.reports[skipped].loss);
  REQUIRE_OK(world_barrier());
  if (world_data().rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("stage 3 hands the final weights over a range at a time, as gathered") {
  const int rank = world_data().rank();
  const std::string dir = testing::shared_token_files(world_data());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 4;
  spec.training.scheduler.total_num_steps = 4;
  spec.training.zero.stage = 3;
  spec.training.zero.param_persistence_threshold = 0;
  const std::string nvme = dir + "/final-" + std::to_string(rank);
  std::filesystem::create_directories(nvme);
  for (const bool offload : {false, true}) {
    INFO((offload ? "offload_param nvme" : "in memory") << ", " << world_data().size()
                                                         << " rank(s)");
    spec.training.zero.offload_param = {};
    if (offload) {
      spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
      spec.training.zero.offload_param.nvme_path = nvme;
    }
    const Run gathered = train_world(spec, 1);
    REQUIRE(gathered.error == "");
    std::vector<float> written(gathered.params.size(), -1.0f);
    int calls = 0;
    TrainerOptions extra;
    extra.write_final_weights = [&](const core::ParameterReader& read) {
      ++calls;
      // In uneven pieces, as a safetensors writer asks for tensors.
      for (int64_t begin = 0; begin < static_cast<int64_t>(written.size()); begin += 777) {
        const int64_t end = std::min<int64_t>(begin + 777, static_cast<int64_t>(written.size()));
        REQUIRE(read(begin, end, written.data() + begin) == "");
      }
      return core::Status();
    };
    const Run streamed = train_world(spec, 1, extra);
    REQUIRE(streamed.error == "");
    CHECK(calls == 1);
    CHECK(written == gathered.params);
    // Partitioned parameters are never whole: over several ranks, or on one
    // with them on NVMe (one rank in memory needs no partitions, and hands
    // over what it holds whole already).
    CHECK(streamed.params.empty() == (world_data().size() > 1 || offload));
    // What the writer returns fails the run.
    extra.write_final_weights = [](const core::ParameterReader&) {
      return core::Status(core::StatusCode::kIoError, "writing the final weights: disk full");
    };
    CHECK(train_world(spec, 1, extra).error == "writing the final weights: disk full");
  }
  REQUIRE_OK(world_barrier());
  if (rank == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
