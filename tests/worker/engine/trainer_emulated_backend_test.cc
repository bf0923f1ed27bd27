// The CUDA backend's code — SimtBackend's kernels and products
// (kernels/simt/simt_backend.h) — trains the tiny GPT as the CPU backend
// does, run here on the CPU emulator of CUDA's thread model: the same
// per-step losses and gradient norms over 20 steps, in fp32 and in bf16.
#include <catch2/catch.hpp>

#include <filesystem>
#include <vector>

#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

std::vector<StepReport> train_on(kernels::Backend& backend, const spec::JobSpec& spec) {
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  std::vector<StepReport> reports;
  TrainerOptions options;
  options.data_comm = &comm::testing::solo_data_comm();
  options.on_step = [&reports](const StepReport& report) { reports.push_back(report); };
  const TrainResult result = train(spec, data, backend, options);
  REQUIRE(result.error == "");
  return reports;
}

TEST_CASE("20 steps on the CUDA backend's kernels match the CPU backend's, fp32 and bf16") {
  const std::string dir = testing::shared_token_files(comm::testing::solo_data_comm());
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 20;
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  spec.training.batch.train_batch_size = 4;
  for (const bool bf16 : {false, true}) {
    INFO((bf16 ? "bf16" : "fp32"));
    spec.training.bf16 = bf16;
    auto cpu = kernels::make_cpu_backend(1);
    // A shuffled schedule: the kernels must not depend on thread order.
    auto emulated =
        kernels::simt::make_emulated_backend({kernels::simt::Schedule::Order::kShuffled, 7});
    const auto expected = train_on(*cpu, spec);
    const auto reports = train_on(*emulated, spec);
    REQUIRE(reports.size() == 20);
    REQUIRE(expected.size() == 20);
    // fp32 sums in other orders (warps instead of vector lanes) drift apart
    // slowly; bf16 rounds the products' operands, and a last-bit difference
    // can round one of them the other way.
    const double tolerance = bf16 ? 2e-3 : 1e-4;
    for (size_t i = 0; i < reports.size(); ++i) {
      INFO("step " << reports[i].step);
      CHECK(reports[i].loss == Approx(expected[i].loss).epsilon(tolerance));
      CHECK(reports[i].grad_norm == Approx(expected[i].grad_norm).epsilon(10 * tolerance));
    }
    REQUIRE(reports.back().eval_loss.has_value());
    CHECK(*reports.back().eval_loss == Approx(*expected.back().eval_loss).epsilon(tolerance));
    // The run learned: the losses fall from about ln(64) = 4.2 (to 3.7).
    CHECK(reports.back().loss < reports.front().loss - 0.3);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
