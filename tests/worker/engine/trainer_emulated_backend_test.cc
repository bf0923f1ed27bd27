// The CUDA backend's code — SimtBackend's kernels and products
// (kernels/simt/simt_backend.h) — trains the tiny GPT as the CPU backend
// does, run here on the CPU emulator of CUDA's thread model: the same
// per-step losses and gradient norms over 20 steps, in fp32 and in bf16.
#include <catch2/catch.hpp>

#include <filesystem>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/worker/engine/emulated_training.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine {
namespace {

using testing::GpuPathCase;

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

// Guarded device memory faults on any host access between the backend's
// calls, as a GPU's addresses would. With offload the trainer keeps the
// model states in host memory, worked on by a CPU backend, and the model
// computes on a mirror in the device's memory; without it every state is
// on the device, and several data ranks average their gradients and gather
// their partitions there (through host staging, where a GPU has NCCL).
// The tensor and pipeline groups pass activations through host copies. The
// reference is the same kernels on the emulator's host memory, where the
// states live in the backend's own memory and its kernels update them:
// where the bytes are changes, not the results.
TEST_CASE("on memory the host cannot touch, ZeRO stages 0-3 train as in host memory") {
  comm::Communicator& world = comm::testing::world_data();
  const std::string dir = testing::shared_token_files(world);
  const spec::JobSpec spec = testing::gpu_path_job(dir);
  const std::string nvme = dir + "/nvme-" + std::to_string(world.rank());
  std::filesystem::create_directories(nvme);
  const int n = world.size();
  // ZeRO-Offload (the optimizer in host memory or on NVMe), and every state
  // on the GPU at stages 0, 1 and 2 (stage 3 below, against stage 2).
  std::vector<GpuPathCase> cases = {{{1, n, 1}, 1, spec::OffloadDevice::kCpu, core::DType::kF32},
                                    {{1, n, 1}, 2, spec::OffloadDevice::kCpu, core::DType::kBF16},
                                    {{1, n, 1}, 2, spec::OffloadDevice::kNvme, core::DType::kF16},
                                    {{1, n, 1}, 0, spec::OffloadDevice::kNone, core::DType::kF32},
                                    {{1, n, 1}, 1, spec::OffloadDevice::kNone, core::DType::kBF16},
                                    {{1, n, 1}, 2, spec::OffloadDevice::kNone, core::DType::kF16}};
  // Partial offload (offload_optimizer cpu, ratio below 1): CPU Adam steps
  // that share of each rank's optimizer states in host memory, the GPU the
  // rest.
  cases.push_back({{1, n, 1},
                   2,
                   spec::OffloadDevice::kCpu,
                   core::DType::kBF16,
                   1,
                   spec::OffloadDevice::kNone,
                   0.5});
  cases.push_back({{1, 1, n},
                   3,
                   spec::OffloadDevice::kCpu,
                   core::DType::kF32,
                   1,
                   spec::OffloadDevice::kNone,
                   0.3});
  if (n == 2) {
    cases.push_back({{1, 1, 2},
                     1,
                     spec::OffloadDevice::kCpu,
                     core::DType::kF16,
                     1,
                     spec::OffloadDevice::kNone,
                     0.75});
    // Pipeline parallelism takes ZeRO stage 1 at most.
    cases.push_back({{1, 1, 2}, 2, spec::OffloadDevice::kCpu, core::DType::kBF16});
    cases.push_back({{2, 1, 1}, 1, spec::OffloadDevice::kCpu, core::DType::kF32});
    // One data rank with its optimizer on the GPU: every state there.
    cases.push_back({{1, 1, 2}, 1, spec::OffloadDevice::kNone, core::DType::kF16});
    cases.push_back({{2, 1, 1}, 0, spec::OffloadDevice::kNone, core::DType::kBF16});
    // ZeRO-Infinity on one data rank: the partition (the whole model) on
    // NVMe, gathered into host memory and mirrored on the GPU a block at a
    // time.
    cases.push_back({{1, 1, 2},
                     3,
                     spec::OffloadDevice::kCpu,
                     core::DType::kF32,
                     1,
                     spec::OffloadDevice::kNvme});
  }
  // ZeRO stage 3 offloaded: the host state gathers each block, the GPU
  // mirrors it around its use; the parameters' partitions in host memory
  // (offload_param cpu, or none said) or on NVMe.
  cases.push_back({{1, n, 1}, 3, spec::OffloadDevice::kCpu, core::DType::kBF16});
  cases.push_back(
      {{1, n, 1}, 3, spec::OffloadDevice::kCpu, core::DType::kF32, 1, spec::OffloadDevice::kCpu});
  cases.push_back(
      {{1, n, 1}, 3, spec::OffloadDevice::kNvme, core::DType::kF16, 1, spec::OffloadDevice::kNvme});
  for (const GpuPathCase& c : cases) testing::check_gpu_path_matches_host_memory(spec, c, nvme);
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("training on memory the host cannot touch refuses what its path lacks, by name") {
  comm::Communicator& world = comm::testing::world_data();
  const std::string dir = testing::shared_token_files(world);
  spec::JobSpec spec = testing::tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.training.steps = 1;
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 1;
  spec.training.batch.train_batch_size = 2 * world.size();
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  auto guarded = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  auto host = kernels::make_cpu_backend(1);
  TrainerOptions options;
  options.data_comm = &world;
  options.host_backend = host.get();
  spec.training.zero.stage = 3;
  spec.training.zero.offload_param.device = spec::OffloadDevice::kNvme;
  CHECK_THAT(train(spec, data, *guarded, options).error,
             Catch::StartsWith("offload_param on GPUs takes offload_optimizer too"));
  spec.training.zero.offload_param.device = spec::OffloadDevice::kNone;
  spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
  spec.training.zero.stage = 2;
  options.host_backend = nullptr;
  CHECK_THAT(train(spec, data, *guarded, options).error,
             Catch::Contains("needs a host backend for the model states"));
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
