// Tensor parallelism changes nothing but where the work runs: with the same
// global batch, a tensor group of N ranks (and tensor x data layouts under
// every ZeRO stage) trains to the losses of one rank, step by step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

struct Run {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<double> eval_losses;
  std::vector<float> params;
};

// The tiny job with 4 heads, so that 2 and 4 tensor ranks split them, and a
// global batch of 4 micro-batches of 2.
spec::JobSpec tp_job(const std::string& dir) {
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.model.num_attention_heads = 4;
  spec.training.steps = 20;
  spec.training.scheduler.total_num_steps = 20;
  return spec;
}

Run train_on(comm::Communicator& data, comm::Communicator* tensor, spec::JobSpec spec) {
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.train_batch_size = 8;
  spec.training.batch.gradient_accumulation_steps = 8 / (2 * data.size());
  const data::TrainingData training_data =
      data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(training_data.error == "");
  auto backend = kernels::make_cpu_backend(1);
  Run run;
  TrainerOptions options;
  options.data_comm = &data;
  options.tensor_comm = tensor;
  options.on_step = [&run](const StepReport& report) {
    run.losses.push_back(report.loss);
    run.grad_norms.push_back(report.grad_norm);
    if (report.eval_loss) run.eval_losses.push_back(*report.eval_loss);
  };
  TrainResult result = train(spec, training_data, *backend, options);
  INFO(result.error);
  REQUIRE(result.error == "");
  run.params = std::move(result.params);
  return run;
}

double worst_relative(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  }
  return worst;
}

void check_matches(const Run& parallel, const Run& single, const spec::ModelSpec& model) {
  CHECK(parallel.losses.size() == 20);
  INFO("largest relative loss difference: " << worst_relative(parallel.losses, single.losses));
  CHECK(worst_relative(parallel.losses, single.losses) < 1e-5);
  INFO("largest relative gradient-norm difference: "
       << worst_relative(parallel.grad_norms, single.grad_norms));
  CHECK(worst_relative(parallel.grad_norms, single.grad_norms) < 1e-4);
  CHECK(worst_relative(parallel.eval_losses, single.eval_losses) < 1e-5);
  // The gathered parameters are the whole model's, as one rank trained them
  // (a vocabulary of 64 needs no extra padding for 2 or 4 tensor ranks).
  REQUIRE(parallel.params.size() == single.params.size());
  const double worst_param =
      testing::param_difference(parallel.params, single.params, model).learning;
  INFO("largest parameter difference: " << worst_param);
  CHECK(worst_param < 1e-5);
}

TEST_CASE("tensor parallelism over the world trains to one rank's losses") {
  comm::ProcessGroups& groups = comm::testing::groups_of({1, 1, comm::testing::world_size()});
  comm::Communicator& solo = comm::testing::solo_data_comm();
  const std::string dir = testing::shared_token_files(comm::testing::world_groups().data());
  const spec::JobSpec spec = tp_job(dir);
  const Run parallel = train_on(groups.data(), &groups.tensor(), spec);
  const Run single = train_on(solo, nullptr, spec);
  check_matches(parallel, single, spec.model);
  // Learning happened: the comparison is not between two flat lines.
  CHECK(single.losses.back() < 0.9 * single.losses.front());
  REQUIRE(comm::testing::world_groups().world().barrier()->wait().ok());
  if (groups.rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("tensor 2 x data N/2 trains to one rank's losses at every ZeRO stage") {
  const int world = comm::testing::world_size();
  if (world < 4) return;  // needs both axes
  comm::ProcessGroups& groups = comm::testing::groups_of({1, world / 2, 2});
  comm::Communicator& solo = comm::testing::solo_data_comm();
  const std::string dir = testing::shared_token_files(comm::testing::world_groups().data());
  spec::JobSpec spec = tp_job(dir);
  const Run single = train_on(solo, nullptr, spec);
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("ZeRO stage " << stage);
    spec.training.zero.stage = stage;
    const Run parallel = train_on(groups.data(), &groups.tensor(), spec);
    check_matches(parallel, single, spec.model);
  }
  REQUIRE(comm::testing::world_groups().world().barrier()->wait().ok());
  if (groups.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
