#include "worker/engine/trainer.h"

#include <catch2/catch.hpp>

#include "core/spec/training_support.h"
#include "kernels/backend.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"

namespace dslaunch::worker::engine {
namespace {

// A data group of this rank alone (the test runs on one rank).
comm::Communicator& solo() { return comm::testing::solo_data_comm(); }

spec::JobSpec job_in(const std::string& dir) {
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 1;
  return spec;
}

TEST_CASE("a stop request ends training, evaluated, after the step it arrived in") {
  const std::string dir = testing::shared_token_files(solo());
  spec::JobSpec spec = job_in(dir);
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  int64_t reported = 0;
  TrainerOptions options;
  options.data_comm = &solo();
  options.on_step = [&](const StepReport& report) {
    reported = report.step;
    if (report.step == 4) CHECK(report.eval_loss.has_value());
    CHECK(report.tokens_per_second > 0);
    CHECK(report.tflops > 0);
    CHECK(report.grad_norm > 0);
    // WarmupCosineLR warms up linearly over 5 steps from 0 to lr.
    if (report.step == 1) CHECK(report.lr < spec.training.optimizer.lr);
  };
  options.stop_requested = [&] { return reported >= 3; };
  const TrainResult result = train(spec, data, *backend, options);
  CHECK(result.error == "");
  CHECK(result.stopped);
  CHECK(result.steps == 4);  // asked during step 4, after step 3 reported
  std::filesystem::remove_all(dir);
}

TEST_CASE("data the model cannot read is refused before the first step, naming the fix") {
  const std::string dir = testing::shared_token_files(solo());
  auto backend = kernels::make_cpu_backend(1);
  TrainerOptions options;
  options.data_comm = &solo();
  int steps = 0;
  options.on_step = [&steps](const StepReport&) { ++steps; };

  spec::JobSpec spec = job_in(dir);
  spec.model.vocab_size = 32;  // the files hold tokens up to 63
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  TrainResult result = train(spec, data, *backend, options);
  CHECK_THAT(result.error, Catch::Contains("train.bin") && Catch::Contains("63") &&
                               Catch::Contains("vocab_size is 32"));

  spec = job_in(dir);
  spec.training.eval_batches = 1000;
  result = train(spec, data, *backend, options);
  CHECK_THAT(result.error, Catch::Contains("eval_batches (1000)"));
  CHECK(steps == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("what the engine cannot do yet is refused before training starts") {
  spec::JobSpec spec = testing::tiny_job("a", "b");
  CHECK(training_support_problem(spec) == "");
  spec.training.zero.stage = 1;
  CHECK(training_support_problem(spec) == "");
  spec.training.zero.stage = 2;
  CHECK(training_support_problem(spec) == "");
  spec.training.zero.stage = 3;
  CHECK(training_support_problem(spec) == "");
  spec = testing::tiny_job("a", "b");
  spec.parallelism.tensor = 2;
  spec.parallelism.pipeline = 2;
  CHECK(training_support_problem(spec) == "");
  spec = testing::tiny_job("a", "b");
  spec.checkpoint.interval = 10;
  spec.fault_tolerance.max_restarts = 1;
  CHECK(training_support_problem(spec) == "");
  spec = testing::tiny_job("a", "b");
  spec.cluster.device = spec::Device::kCuda;
  CHECK_THAT(training_support_problem(spec),
             Catch::StartsWith(spec::cuda_training_built() ? "training on GPUs takes Adam"
                                                           : "this build trains on CPU only"));
  // Optimizer offload to NVMe runs; to the CPU it would change nothing here.
  spec = testing::tiny_job("a", "b");
  spec.training.zero.stage = 2;
  spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNvme;
  CHECK(training_support_problem(spec) == "");
  spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
  CHECK_THAT(training_support_problem(spec),
             Catch::StartsWith("offload_optimizer device cpu: on the CPU engine"));
  spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNone;
  spec.training.zero.stage = 3;
  spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
  CHECK(training_support_problem(spec) == "");
  spec.training.zero.offload_param.device = spec::OffloadDevice::kCpu;
  CHECK_THAT(training_support_problem(spec),
             Catch::StartsWith("offload_param device cpu: on the CPU engine"));
}

TEST_CASE(
    "training on GPUs takes Adam at ZeRO stages 0-3, its optimizer on the GPU, offloaded or both") {
  spec::JobSpec spec = testing::tiny_job("a", "b");
  spec.cluster.device = spec::Device::kCuda;
  for (const int stage : {0, 1, 2}) {
    spec.training.zero.stage = stage;
    spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNone;
    CHECK(device_training_problem(spec) == "");
    if (stage == 0) continue;  // ZeRO-Offload takes stage 1 or more (the parser says so)
    for (const auto device : {spec::OffloadDevice::kCpu, spec::OffloadDevice::kNvme}) {
      spec.training.zero.offload_optimizer.device = device;
      CHECK(device_training_problem(spec) == "");
    }
  }
  spec.training.optimizer.type = spec::OptimizerType::kLamb;
  CHECK_THAT(device_training_problem(spec), Catch::StartsWith("training on GPUs takes Adam"));
  spec.training.optimizer.type = spec::OptimizerType::kOneBitAdam;
  CHECK_THAT(device_training_problem(spec), Catch::StartsWith("training on GPUs takes Adam"));
  spec.training.optimizer.type = spec::OptimizerType::kAdamW;
  spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
  // Partial offload: the rest of the states on the GPU, so neither the
  // parameters offloaded nor ZeRO++ (which the host state's collectives do).
  spec.training.zero.offload_optimizer.ratio = 0.5;
  spec.training.zero.stage = 3;
  CHECK(device_training_problem(spec) == "");
  spec.training.zero.offload_param.device = spec::OffloadDevice::kCpu;
  CHECK_THAT(device_training_problem(spec),
             Catch::StartsWith("offload_param on GPUs takes every optimizer state offloaded"));
  spec.training.zero.offload_param.device = spec::OffloadDevice::kNone;
  spec.training.zero.quantized_gradients = true;
  CHECK_THAT(device_training_problem(spec), Catch::StartsWith("ZeRO++"));
  spec.training.zero.quantized_gradients = false;
  spec.training.zero.offload_optimizer.ratio = 1;
  // Stage 3 offloaded, the parameters' partitions in host memory or on
  // NVMe, ZeRO++ on the host state's collectives.
  for (const auto device :
       {spec::OffloadDevice::kNone, spec::OffloadDevice::kCpu, spec::OffloadDevice::kNvme}) {
    spec.training.zero.offload_param.device = device;
    CHECK(device_training_problem(spec) == "");
  }
  spec.training.zero.hpz_partition_size = 2;
  spec.training.zero.quantized_weights = true;
  CHECK(device_training_problem(spec) == "");
  // With every state on the GPU: no offload_param, no ZeRO++.
  spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kNone;
  CHECK_THAT(device_training_problem(spec), Catch::StartsWith("offload_param on GPUs takes"));
  spec.training.zero.offload_param.device = spec::OffloadDevice::kNone;
  CHECK_THAT(device_training_problem(spec), Catch::StartsWith("ZeRO++"));
  spec.training.zero.hpz_partition_size = 1;
  CHECK_THAT(device_training_problem(spec), Catch::StartsWith("ZeRO++"));
  spec.training.zero.quantized_weights = false;
  CHECK(device_training_problem(spec) == "");
  spec.training.zero.stage = 1;
  spec.parallelism.tensor = 2;
  spec.parallelism.pipeline = 2;
  CHECK(device_training_problem(spec) == "");
  // Attention takes heads of any width.
  spec.model.hidden_size = 1024;
  spec.model.num_attention_heads = 4;
  CHECK(device_training_problem(spec) == "");
}

}  // namespace
}  // namespace dslaunch::worker::engine

namespace dslaunch::worker::engine {
namespace {

TEST_CASE("the plan's batch sizes are used as sent, and refused when they do not fit the group") {
  const std::string dir = testing::shared_token_files(solo());
  spec::JobSpec spec = job_in(dir);  // the spec alone: micro 2, accumulation 1
  spec.training.steps = 2;
  spec.training.eval_interval = 0;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);

  SECTION("sent sizes win over the spec's") {
    // The plan's: 4 micro-batches of 1 per step; the step's loss is their mean.
    TrainerOptions options;
    options.data_comm = &solo();
    options.batch = spec::BatchSizes{4, 1, 4};
    std::vector<double> planned;
    options.on_step = [&](const StepReport& report) { planned.push_back(report.loss); };
    REQUIRE(train(spec, data, *backend, options).error == "");
    // The same global batch from the spec gives the same losses (up to summation order).
    spec.training.batch.train_batch_size = 4;
    spec.training.batch.micro_batch_per_gpu = 1;
    spec.training.batch.gradient_accumulation_steps = 4;
    TrainerOptions from_spec;
    from_spec.data_comm = &solo();
    std::vector<double> resolved;
    from_spec.on_step = [&](const StepReport& report) { resolved.push_back(report.loss); };
    REQUIRE(train(spec, data, *backend, from_spec).error == "");
    REQUIRE(planned.size() == 2);
    CHECK(planned == resolved);
  }
  SECTION("sizes that do not multiply out for this group are refused before the first step") {
    TrainerOptions options;
    options.data_comm = &solo();
    options.batch = spec::BatchSizes{8, 2, 2};  // 2 x 2 x 1 rank is 4, not 8
    int steps = 0;
    options.on_step = [&steps](const StepReport&) { ++steps; };
    const TrainResult result = train(spec, data, *backend, options);
    CHECK(result.error ==
          "the plan's batch sizes (train_batch_size 8, micro-batch 2, accumulation 2) do not fit "
          "a data group of 1 ranks");
    CHECK(steps == 0);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
