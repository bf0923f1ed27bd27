#pragma once

// Training on the GPU path, checked on the CPU emulator of CUDA's thread
// model (kernels/simt): a run on guarded device memory, which faults on any
// host access between the backend's calls as a GPU's addresses would,
// against the same kernels on the emulator's host memory, where the states
// live in the backend's own memory and its kernels update them.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/layout/backward_gradient_pages.h"
#include "core/layout/zero3_prefetch.h"
#include "core/layout/zero3_regions.h"
#include "core/spec/training_support.h"
#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"
#include "launcher/plan/memory_estimate.h"
#include "tests/worker/engine/trainer_test_support.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine::testing {

struct OffloadRun {
  std::vector<StepReport> reports;
  std::vector<float> params;
  MemoryReport memory;
  std::vector<std::string> notices;  // TrainerOptions::on_notice's
};

// The process grid of a run: pipeline stages, data ranks, tensor ranks.
struct Layout {
  int pipeline = 1;
  int data = 1;
  int tensor = 1;
};

// Trains `spec` on `backend` (with `host_backend` for the model states where
// its memory is not the host's) over `layout`'s groups; with the fp16
// drill when `poison`; writing each checkpoint under `checkpoints` unless it
// is empty; from `resume` if set; with `device_communicator` making the
// data group's communicator on the device (unset: host staging).
inline OffloadRun train_offloaded(
    kernels::Backend& backend, const spec::JobSpec& spec, Layout layout,
    kernels::Backend* host_backend, bool poison, const std::string& checkpoints = "",
    std::optional<ResumePoint> resume = std::nullopt,
    decltype(TrainerOptions::device_communicator) device_communicator = {}) {
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  REQUIRE(data.error == "");
  comm::ProcessGroups& groups =
      comm::testing::groups_of({layout.pipeline, layout.data, layout.tensor});
  OffloadRun run;
  TrainerOptions options;
  options.data_comm = &groups.data();
  options.tensor_comm = &groups.tensor();
  options.pipeline_comm = &groups.pipeline();
  options.host_backend = host_backend;
  options.on_step = [&run](const StepReport& report) { run.reports.push_back(report); };
  options.on_memory = [&run](const MemoryReport& memory) { run.memory = memory; };
  options.on_notice = [&run](const std::string& notice) { run.notices.push_back(notice); };
  const int rank = groups.world().rank();
  const int last = groups.world().size() - 1;
  // The drill for one rank overflowing: NaN gradients on the last rank at step 3.
  if (poison) options.poison_gradients = [=](int64_t step) { return rank == last && step == 3; };
  if (!checkpoints.empty()) {
    options.save_checkpoint = [&](const CheckpointSlice& slice) {
      write_test_shard(checkpoints, slice, rank, last + 1);
    };
  }
  options.resume = std::move(resume);
  options.device_communicator = std::move(device_communicator);
  TrainResult result = train(spec, data, backend, options);
  REQUIRE(result.error == "");
  run.params = std::move(result.params);
  return run;
}

// The tiny GPT on the GPU path, its token files in `dir`: six steps,
// evaluating every three.
inline spec::JobSpec gpu_path_job(const std::string& dir) {
  spec::JobSpec spec = tiny_job(dir + "/train.bin", dir + "/valid.bin");
  spec.cluster.device = spec::Device::kCuda;
  spec.training.steps = 6;
  spec.training.scheduler.total_num_steps = 6;
  spec.training.scheduler.warmup_num_steps = 1;
  spec.training.eval_interval = 3;
  return spec;
}

// One layout and setting of the GPU path.
struct GpuPathCase {
  Layout layout;
  int stage = 1;
  spec::OffloadDevice offload = spec::OffloadDevice::kNone;
  core::DType precision = core::DType::kF32;
  int virtual_stages = 1;
  spec::OffloadDevice offload_param = spec::OffloadDevice::kNone;
  double ratio = 1;  // offload_optimizer's: below 1 with cpu, partial offload
};

// Six steps of `spec` (a tiny_job on the GPU path, evaluating every 3
// steps) as `c` sets it up, on guarded memory and on host memory: the
// losses, norms, skipped steps (the fp16 drill overflows one rank at step
// 3), evaluation losses and final parameters equal bit for bit; the device
// holds what the plan counts for it; the run learned. `nvme`: this rank's
// folder for offload_optimizer nvme.
inline void check_gpu_path_matches_host_memory(spec::JobSpec spec, const GpuPathCase& c,
                                               const std::string& nvme) {
  INFO("pipeline " << c.layout.pipeline << " (virtual stages " << c.virtual_stages << "), data "
                   << c.layout.data << ", tensor " << c.layout.tensor << ", ZeRO stage " << c.stage
                   << ", " << core::dtype_name(c.precision) << ", offload "
                   << static_cast<int>(c.offload) << " (ratio " << c.ratio
                   << "), parameters offloaded " << static_cast<int>(c.offload_param));
  spec.parallelism.tensor = c.layout.tensor;
  spec.parallelism.pipeline = c.layout.pipeline;
  spec.parallelism.virtual_stages = c.virtual_stages;
  // Interleaving needs a block for each of a rank's model chunks.
  spec.model.num_layers = std::max(2, c.layout.pipeline * c.virtual_stages);
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  spec.training.batch.train_batch_size = 4 * c.layout.data;
  spec.training.zero.stage = c.stage;
  spec.training.zero.offload_optimizer.device = c.offload;
  spec.training.zero.offload_optimizer.nvme_path = nvme;
  spec.training.zero.offload_optimizer.ratio = c.ratio;
  spec.training.zero.offload_param.device = c.offload_param;
  spec.training.zero.offload_param.nvme_path = nvme;
  // At stage 3, tensors under 1,000 floats stay whole; the blocks' weights
  // and the token embedding are gathered around their use.
  spec.training.zero.param_persistence_threshold = 1000;
  spec.training.bf16 = c.precision == core::DType::kBF16;
  spec.training.fp16.enabled = c.precision == core::DType::kF16;
  spec.training.fp16.initial_scale_power = 8;
  const bool poison = spec.training.fp16.enabled;
  REQUIRE(spec::device_training_problem(spec) == "");
  auto host = kernels::make_cpu_backend(1);
  auto guarded = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  auto accessible = kernels::simt::make_emulated_backend();
  REQUIRE_FALSE(guarded->memory_is_host());
  // Every state on the GPU needs no host backend; offloaded whole, the
  // states are the host backend's, mirrored on the GPU; a share offloaded,
  // the host backend's CPU Adam steps that share.
  const bool offloaded = c.offload != spec::OffloadDevice::kNone;
  const bool mirrored = offloaded && !spec::partial_optimizer_offload(spec.training.zero);
  const OffloadRun on_device =
      train_offloaded(*guarded, spec, c.layout, offloaded ? host.get() : nullptr, poison);
  const OffloadRun expected = train_offloaded(*accessible, spec, c.layout, nullptr, poison);
  REQUIRE(on_device.reports.size() == 6);
  REQUIRE(expected.reports.size() == 6);
  for (size_t i = 0; i < on_device.reports.size(); ++i) {
    const StepReport& got = on_device.reports[i];
    const StepReport& want = expected.reports[i];
    INFO("step " << got.step);
    CHECK(got.loss == want.loss);
    CHECK(got.grad_norm == Approx(want.grad_norm).epsilon(1e-12));
    CHECK(got.skipped == want.skipped);
    CHECK(got.eval_loss == want.eval_loss);
  }
  // The poisoned step was skipped on every rank, and training went on.
  if (poison) {
    CHECK(on_device.reports[2].skipped);
    CHECK(on_device.reports.back().skipped_steps == 1);
  }
  CHECK(on_device.params == expected.params);
  // The device holds the model states (with offload, their mirror), the
  // reduction's buffers and the activations, as the plan counts them, and a
  // little more: the backend's own partial sums (2 KB here) and the model's
  // loss; the host backend's memory is not the device's.
  const int stage = comm::testing::groups_of({c.layout.pipeline, c.layout.data, c.layout.tensor})
                        .pipeline()
                        .rank();
  const int64_t page = sysconf(_SC_PAGESIZE);
  // With every state on the GPU, stages 2-3 over several ranks hold
  // backward's gradients a few buckets at a time, the pages the plan's
  // replay of backward counts; host staging reduces each bucket at once
  // (none in flight: it has no stream to overlap on).
  const int64_t gradient_workspace =
      !mirrored && c.stage >= 2 && c.layout.data > 1
          ? core::backward_gradient_peak_bytes(
                plan::stage_parameter_table(spec.model, spec.parallelism, stage),
                spec.training.zero.reduce_bucket_size, 0, page)
          : 0;
  // (Mirrored, the host state's workspace is in host memory.)
  if (!mirrored) CHECK(on_device.memory.gradient_workspace_peak == gradient_workspace);
  const plan::ModelStateBytes planned_states = plan::mirrored_state_bytes(
      plan::parameters_per_rank(spec.model, spec.parallelism, stage), spec.training, c.layout.data,
      plan::mirror_bytes(spec.model, spec.parallelism, spec.training, c.layout.data, stage, page));
  // A share offloaded: its masters and moments in host memory, as planned.
  if (offloaded && !mirrored) {
    CHECK(planned_states.offloaded_to_host > 0);
    CHECK(on_device.memory.optimizer_states ==
          planned_states.optimizer_states + planned_states.offloaded_to_host);
  }
  // Every state on the GPU at stage 3: the blocks gathered around their
  // use, and over several ranks the persistent tensors packed.
  int64_t gathered = 0;
  if (!mirrored && c.stage == 3) {
    const core::Zero3Regions regions(
        plan::stage_parameter_table(spec.model, spec.parallelism, stage),
        spec.training.zero.param_persistence_threshold);
    const core::Zero3Prefetch prefetch(regions, spec.training.zero.prefetch_bucket_size,
                                       spec.training.zero.max_live_parameters);
    gathered = core::gathered_peak_bytes(regions, page, &prefetch) +
               (c.layout.data > 1 ? regions.persistent_floats() * 4 : 0);
  }
  const int64_t planned =
      planned_states.device_total() + gradient_workspace + gathered +
      plan::activation_bytes_per_rank(spec.model, spec.parallelism, spec.training, 2, 2, stage,
                                      spec::Device::kCuda);
  // (The plan rounds partitions as DeepSpeed does, the engine to 16 floats.)
  CHECK(expected.memory.device_peak == 0);
  // (At stage 3 on the GPU the partition's pages round up too, by two at most.)
  const int64_t partition_pages = gathered > 0 ? 2 * page : 0;
  CHECK(on_device.memory.device_peak <= planned + partition_pages + 4096);
  CHECK(on_device.memory.device_peak >= planned - 4096);
  // It learned.
  CHECK(*on_device.reports.back().eval_loss < *on_device.reports[2].eval_loss);
}

// ZeRO stage 3 with every state on the GPU (guarded memory, where reading
// a block not gathered faults) against stage 2 there: the same reductions
// and steps, so the same losses, norms, skipped steps, evaluation losses
// and final parameters, bit for bit. The device holds what the plan counts,
// its gathered parameters in whole pages of the emulator's (the host's)
// size; tensors under 1,000 floats stay whole (persistent), the others are
// gathered around their use.
inline void check_stage3_matches_stage2_on_device(spec::JobSpec spec, Layout layout,
                                                  core::DType precision) {
  INFO("data " << layout.data << ", tensor " << layout.tensor << ", "
               << core::dtype_name(precision));
  spec.parallelism.tensor = layout.tensor;
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  spec.training.batch.train_batch_size = 4 * layout.data;
  spec.training.zero.param_persistence_threshold = 1000;
  spec.training.bf16 = precision == core::DType::kBF16;
  spec.training.fp16.enabled = precision == core::DType::kF16;
  spec.training.fp16.initial_scale_power = 8;
  const bool poison = spec.training.fp16.enabled;
  auto guarded = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  spec.training.zero.stage = 2;
  const OffloadRun stage2 = train_offloaded(*guarded, spec, layout, nullptr, poison);
  spec.training.zero.stage = 3;
  REQUIRE(spec::device_training_problem(spec) == "");
  const OffloadRun stage3 = train_offloaded(*guarded, spec, layout, nullptr, poison);
  REQUIRE(stage3.reports.size() == 6);
  REQUIRE(stage2.reports.size() == 6);
  for (size_t i = 0; i < stage3.reports.size(); ++i) {
    const StepReport& got = stage3.reports[i];
    const StepReport& want = stage2.reports[i];
    INFO("step " << got.step);
    CHECK(got.loss == want.loss);
    CHECK(got.grad_norm == want.grad_norm);
    CHECK(got.skipped == want.skipped);
    CHECK(got.eval_loss == want.eval_loss);
  }
  if (poison) CHECK(stage3.reports.back().skipped_steps == 1);
  CHECK(stage3.params == stage2.params);
  // The partition and the gathered blocks, not the whole weights.
  const int64_t psi = plan::parameters_per_rank(spec.model, spec.parallelism, 0);
  const core::Zero3Regions regions(plan::stage_parameter_table(spec.model, spec.parallelism, 0),
                                   spec.training.zero.param_persistence_threshold);
  REQUIRE(regions.layers == 2);
  REQUIRE(regions.region_size(1) > 0);  // the blocks' weights are gathered
  REQUIRE(regions.persistent_floats() > 0);
  const int64_t page = sysconf(_SC_PAGESIZE);
  const core::Zero3Prefetch prefetch(regions, spec.training.zero.prefetch_bucket_size,
                                     spec.training.zero.max_live_parameters);
  const int64_t gathered = core::gathered_peak_bytes(regions, page, &prefetch);
  CHECK(stage3.memory.parameter_workspace_peak == gathered);
  // Backward's gradients, a few buckets at a time over several ranks
  // (host staging: each reduced at once).
  const int64_t gradient_workspace =
      layout.data > 1 ? core::backward_gradient_peak_bytes(
                            plan::stage_parameter_table(spec.model, spec.parallelism, 0),
                            spec.training.zero.reduce_bucket_size, 0, page)
                      : 0;
  CHECK(stage2.memory.gradient_workspace_peak == gradient_workspace);
  CHECK(stage3.memory.gradient_workspace_peak == gradient_workspace);
  CHECK(stage3.memory.communication_buffers - stage2.memory.communication_buffers ==
        (layout.data > 1 ? regions.persistent_floats() * 4 : 0));
  const int64_t planned =
      plan::mirrored_state_bytes(psi, spec.training, layout.data).device_total() + gathered +
      gradient_workspace +
      (layout.data > 1 ? regions.persistent_floats() * 4 : 0) +  // the packed persistent tensors
      plan::activation_bytes_per_rank(spec.model, spec.parallelism, spec.training, 2, 2, 0,
                                      spec::Device::kCuda);
  // The partition's pages round up too (at most two more).
  CHECK(stage3.memory.device_peak <= planned + 2 * page + 4096);
  CHECK(stage3.memory.device_peak >= planned - 4 * page);
}

}  // namespace dslaunch::worker::engine::testing
