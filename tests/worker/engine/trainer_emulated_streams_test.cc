// The GPU path in NCCL's order, on the CPU: the emulator's deferred
// streams (each stream's work runs only when the host or another stream
// needs it) and a communicator that queues its collectives on a stream of
// its own after the default stream's work, as NCCL's does
// (tests/worker/parallel/stream_ordered_communicator.h), through which the
// gradient reduction overlaps backward. Against host staging in program
// order: the same bits, at every ZeRO stage, backward's gradient pages as
// the plan replays them with the buckets left in flight, and at stage 3 the
// prefetched blocks' pages as the plan replays them.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "core/layout/backward_gradient_pages.h"
#include "core/layout/zero3_prefetch.h"
#include "core/layout/zero3_regions.h"
#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "launcher/plan/memory_estimate.h"
#include "tests/worker/engine/emulated_training.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/stream_ordered_communicator.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/engine/trainer.h"
#include "worker/parallel/device_gradient_reducer.h"

namespace dslaunch::worker::engine {
namespace {

using testing::OffloadRun;
using testing::train_offloaded;

TEST_CASE("on deferred streams in NCCL's order, ZeRO stages 0-3 train as through host staging") {
  comm::Communicator& world = comm::testing::world_data();
  const std::string dir = testing::shared_token_files(world);
  spec::JobSpec spec = testing::gpu_path_job(dir);
  const int n = world.size();
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  spec.training.batch.train_batch_size = 4 * n;
  spec.training.zero.param_persistence_threshold = 1000;
  spec.training.fp16.initial_scale_power = 8;
  // Stage 3 prefetches the block after the one in use, its gather queued
  // on the communicator's stream while the GPU works on the one before.
  const core::Zero3Regions regions(plan::stage_parameter_table(spec.model, spec.parallelism, 0),
                                   spec.training.zero.param_persistence_threshold);
  REQUIRE(regions.layers >= 2);
  spec.training.zero.prefetch_bucket_size = regions.region_size(1);
  const core::Zero3Prefetch prefetch(regions, spec.training.zero.prefetch_bucket_size,
                                     spec.training.zero.max_live_parameters);
  using kernels::simt::StreamOrder;
  // Deferring every stream catches NCCL's stream (or the offloaded share's
  // copies) reading what backward has not yet written; an eager default
  // stream catches the model reading what NCCL has not yet gathered or
  // reduced, or weights the host has not yet sent back.
  const struct {
    int stage;
    core::DType precision;
    StreamOrder order;
    double offload_ratio = 0;  // offload_optimizer cpu's, when above 0
  } cases[] = {{0, core::DType::kF32, StreamOrder::kDeferred},
               {1, core::DType::kBF16, StreamOrder::kDeferred},
               {2, core::DType::kF16, StreamOrder::kDeferred},
               {3, core::DType::kBF16, StreamOrder::kDeferred},
               {2, core::DType::kF16, StreamOrder::kEagerDefault},
               {3, core::DType::kBF16, StreamOrder::kEagerDefault},
               {2, core::DType::kBF16, StreamOrder::kDeferred, 0.5},
               {1, core::DType::kF32, StreamOrder::kEagerDefault, 0.5}};
  const auto host = kernels::make_cpu_backend(1);
  for (const auto& c : cases) {
    INFO("ZeRO stage " << c.stage << ", " << core::dtype_name(c.precision)
                       << (c.order == StreamOrder::kDeferred ? ", every stream deferred"
                                                             : ", the default stream eager")
                       << ", offload ratio " << c.offload_ratio);
    spec.training.zero.offload_optimizer.device =
        c.offload_ratio > 0 ? spec::OffloadDevice::kCpu : spec::OffloadDevice::kNone;
    spec.training.zero.offload_optimizer.ratio = c.offload_ratio > 0 ? c.offload_ratio : 1;
    kernels::Backend* host_backend = c.offload_ratio > 0 ? host.get() : nullptr;
    spec.training.zero.stage = c.stage;
    spec.training.bf16 = c.precision == core::DType::kBF16;
    spec.training.fp16.enabled = c.precision == core::DType::kF16;
    const bool poison = spec.training.fp16.enabled;
    auto deferred =
        kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded, c.order);
    auto program = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
    const auto stream_ordered = [&deferred](comm::Communicator& data)
        -> core::StatusOr<std::unique_ptr<comm::Communicator>> {
      core::StatusOr<std::unique_ptr<comm::Communicator>> host = data.duplicate("nccl-order");
      if (!host.ok()) return host.status();
      return std::unique_ptr<comm::Communicator>(
          std::make_unique<comm::testing::StreamOrderedCommunicator>(std::move(*host), *deferred));
    };
    const OffloadRun got = train_offloaded(*deferred, spec, {1, n, 1}, host_backend, poison, "",
                                           std::nullopt, stream_ordered);
    const OffloadRun want = train_offloaded(*program, spec, {1, n, 1}, host_backend, poison);
    REQUIRE(got.reports.size() == want.reports.size());
    for (size_t i = 0; i < got.reports.size(); ++i) {
      INFO("step " << got.reports[i].step);
      CHECK(got.reports[i].loss == want.reports[i].loss);
      CHECK(got.reports[i].grad_norm == want.reports[i].grad_norm);
      CHECK(got.reports[i].skipped == want.reports[i].skipped);
      CHECK(got.reports[i].eval_loss == want.reports[i].eval_loss);
    }
    CHECK(got.params == want.params);
    if (c.stage < 2) continue;
    const int64_t page = sysconf(_SC_PAGESIZE);
    if (c.stage == 3) {
      // The gathered blocks, prefetched ones included, as the plan replays them.
      const int64_t gathered = core::gathered_peak_bytes(regions, page, &prefetch);
      CHECK(got.memory.parameter_workspace_peak == gathered);
      CHECK(want.memory.parameter_workspace_peak == gathered);
      CHECK(gathered > core::gathered_peak_bytes(regions, page, nullptr));
    }
    // Backward's pages: the buckets the reducer leaves in flight hold theirs
    // too, as the plan replays it.
    CHECK(got.memory.gradient_workspace_peak ==
          core::backward_gradient_peak_bytes(plan::stage_parameter_table(spec.model,
                                                                          spec.parallelism, 0),
                                             spec.training.zero.reduce_bucket_size,
                                             DeviceGradientReducer::kBucketsInFlight, page));
    CHECK(got.memory.gradient_workspace_peak >= want.memory.gradient_workspace_peak);
  }
  REQUIRE_OK(comm::testing::world_barrier());
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dslaunch::worker::engine
