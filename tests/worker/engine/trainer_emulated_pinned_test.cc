// offload_optimizer.pin_memory on the GPU path, run on the emulator over
// guarded memory: the host buffers the offload copies go through are
// pinned (Backend::pin_host_memory), the emulator counts each copy's bytes
// as pinned or pageable, and pinning changes which, not the results.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>

#include "core/byte_size_text.h"
#include "core/dtype.h"
#include "core/layout/device_optimizer_bytes.h"
#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "launcher/plan/memory_estimate.h"
#include "tests/worker/engine/emulated_training.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/engine/trainer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {
namespace {

using kernels::simt::HostCopyTally;

struct PinnedRun {
  testing::OffloadRun run;
  HostCopyTally copies;
};

// Trains the tiny GPT over every rank as data ranks at ZeRO `stage` with
// the optimizer offloaded (`ratio` of it; below 1, partial offload),
// pinned or not, on a device that pins at most `pinnable` bytes.
PinnedRun train_pinned(spec::JobSpec spec, int stage, core::DType precision, double ratio, bool pin,
                       int64_t pinnable = std::numeric_limits<int64_t>::max()) {
  const int ranks = comm::testing::world_data().size();
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  spec.training.batch.train_batch_size = 4 * ranks;
  spec.training.zero.stage = stage;
  spec.training.zero.offload_optimizer.device = spec::OffloadDevice::kCpu;
  spec.training.zero.offload_optimizer.ratio = ratio;
  spec.training.zero.offload_optimizer.pin_memory = pin;
  spec.training.bf16 = precision == core::DType::kBF16;
  auto host = kernels::make_cpu_backend(1);
  auto guarded = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  kernels::simt::limit_pinned_bytes(*guarded, pinnable);
  PinnedRun pinned;
  pinned.run = testing::train_offloaded(*guarded, spec, {1, ranks, 1}, host.get(), false);
  pinned.copies = kernels::simt::host_copy_tally(*guarded);
  return pinned;
}

// The same training pinned and not: the same losses and parameters, bit
// for bit, and the same bytes copied each way, of which the pinned run
// moved `to_device` and `to_host` through pinned memory; every pin
// released when training ended.
void check_pinned(const spec::JobSpec& spec, int stage, core::DType precision, double ratio,
                  int64_t to_device, int64_t to_host) {
  INFO("ZeRO stage " << stage << ", " << core::dtype_name(precision) << ", ratio " << ratio);
  const PinnedRun pinned = train_pinned(spec, stage, precision, ratio, true);
  const PinnedRun pageable = train_pinned(spec, stage, precision, ratio, false);
  REQUIRE(pinned.run.reports.size() == 6);
  REQUIRE(pageable.run.reports.size() == 6);
  for (size_t i = 0; i < pinned.run.reports.size(); ++i) {
    CHECK(pinned.run.reports[i].loss == pageable.run.reports[i].loss);
    CHECK(pinned.run.reports[i].eval_loss == pageable.run.reports[i].eval_loss);
  }
  CHECK(pinned.run.params == pageable.run.params);
  // Everything asked for was pinned: nothing to say.
  CHECK(pinned.run.notices.empty());
  CHECK(pinned.copies.to_device.pinned == to_device);
  CHECK(pinned.copies.to_host.pinned == to_host);
  CHECK(pinned.copies.pinned_ranges == 0);
  CHECK(pageable.copies.to_device.pinned == 0);
  CHECK(pageable.copies.to_host.pinned == 0);
  CHECK(pinned.copies.to_device.pinned + pinned.copies.to_device.pageable ==
        pageable.copies.to_device.pageable);
  CHECK(pinned.copies.to_host.pinned + pinned.copies.to_host.pageable ==
        pageable.copies.to_host.pageable);
}

// Partial offload at ratio 0.5: the bytes of this rank's partition of `n`
// floats that CPU Adam steps.
int64_t host_share_bytes(int64_t n, comm::Communicator& world) {
  const ZeroPartition partition = make_zero_partition(n, world.size(), kZeroPartitionAlignment);
  const int64_t owned = partition.end(world.rank()) - partition.begin(world.rank());
  return core::host_optimizer_elements(owned, 0.5) * static_cast<int64_t>(sizeof(float));
}

TEST_CASE("offload_optimizer.pin_memory pins the host buffers the offload copies go through") {
  comm::Communicator& world = comm::testing::world_data();
  const std::string dir = testing::shared_token_files(world);
  const spec::JobSpec spec = testing::gpu_path_job(dir);
  const int64_t steps = 6;
  const int64_t n = plan::parameters_per_rank(spec.model, spec.parallelism, 0);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  // ZeRO-Offload at stage 1: the whole parameters go up once and after each
  // step, the whole gradients come down in the step's last micro-batch,
  // all through pinned memory.
  check_pinned(spec, 1, core::DType::kF32, 1, (1 + steps) * bytes, steps * bytes);
  // At stage 2 the parameters as at stage 1. Over several ranks the
  // gradients come down into the state's workspace, which gives its pages
  // back as it reduces them (locked pages cannot go back): pageable. (One
  // rank has no partitions to reduce into: it keeps stage 1's gradients.)
  check_pinned(spec, 2, core::DType::kBF16, 1, (1 + steps) * bytes,
               world.size() > 1 ? 0 : steps * bytes);
  // Partial offload: each step the host's share of this rank's partition
  // has its gradients come down and its updated weights (fp32: the
  // masters; 16-bit: their rounding) go up through the pinned staging
  // buffers; the rest never leaves the GPU.
  const int64_t share = host_share_bytes(n, world);
  for (const core::DType precision : {core::DType::kF32, core::DType::kBF16}) {
    check_pinned(spec, 1, precision, 0.5, steps * share, steps * share);
  }
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

// What the driver refused to pin, named once in a notice; the run the same
// as one unpinned, its copies through what was pinned.
void check_refused(const spec::JobSpec& spec, int stage, double ratio, int64_t pinnable,
                   int64_t to_device, int64_t to_host, int64_t refused) {
  INFO("ZeRO stage " << stage << ", ratio " << ratio << ", " << pinnable << " bytes pinnable");
  const PinnedRun pinned = train_pinned(spec, stage, core::DType::kF32, ratio, true, pinnable);
  const PinnedRun pageable = train_pinned(spec, stage, core::DType::kF32, ratio, false);
  REQUIRE(pinned.run.reports.size() == 6);
  CHECK(pinned.run.params == pageable.run.params);
  CHECK(pinned.copies.to_device.pinned == to_device);
  CHECK(pinned.copies.to_host.pinned == to_host);
  CHECK(pinned.copies.pinned_ranges == 0);
  REQUIRE(pinned.run.notices.size() == 1);
  CHECK_THAT(pinned.run.notices[0],
             Catch::StartsWith("offload_optimizer.pin_memory: the GPU's driver did not page-lock " +
                               core::byte_size_text(refused) + " of host memory") &&
                 Catch::EndsWith("stay pageable, which is slower"));
  CHECK(pageable.run.notices.empty());
}

TEST_CASE("where the driver pins less than asked, the run goes on pageable and says how much") {
  comm::Communicator& world = comm::testing::world_data();
  const std::string dir = testing::shared_token_files(world);
  const spec::JobSpec spec = testing::gpu_path_job(dir);
  const int64_t steps = 6;
  const int64_t n = plan::parameters_per_rank(spec.model, spec.parallelism, 0);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  // ZeRO-Offload at stage 1 pins the parameters first, then the
  // gradients: room for the parameters only, the gradients stay pageable.
  check_refused(spec, 1, 1, bytes, (1 + steps) * bytes, 0, bytes);
  // Partial offload with nothing lockable: both staging buffers refused.
  const int64_t share = host_share_bytes(n, world);
  check_refused(spec, 1, 0.5, 0, 0, 0, 2 * share);
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
