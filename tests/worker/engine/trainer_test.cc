#include "worker/engine/trainer.h"

#include <mpi.h>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "worker/data/training_data.h"
#include "worker/engine/training_support.h"

namespace dslaunch::worker::engine {
namespace {

spec::JobSpec job_in(const std::string& dir) {
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 1;
  return spec;
}

TEST_CASE("a stop request ends training, evaluated, after the step it arrived in") {
  const std::string dir = testing::shared_token_files(MPI_COMM_SELF);
  spec::JobSpec spec = job_in(dir);
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  int64_t reported = 0;
  TrainerOptions options;
  options.data_comm = MPI_COMM_SELF;
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
  const std::string dir = testing::shared_token_files(MPI_COMM_SELF);
  auto backend = kernels::make_cpu_backend(1);
  TrainerOptions options;
  options.data_comm = MPI_COMM_SELF;
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
  CHECK_THAT(training_support_problem(spec), Catch::Contains("tensor"));
  spec = testing::tiny_job("a", "b");
  spec.checkpoint.interval = 10;
  spec.fault_tolerance.max_restarts = 1;
  CHECK(training_support_problem(spec) == "");
  spec = testing::tiny_job("a", "b");
  spec.cluster.device = spec::Device::kCuda;
  CHECK_THAT(training_support_problem(spec), Catch::Contains("cpu"));
}

}  // namespace
}  // namespace dslaunch::worker::engine
