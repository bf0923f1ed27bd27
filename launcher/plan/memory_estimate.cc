#include "launcher/plan/memory_estimate.h"

#include <algorithm>
#include <cmath>

#include "core/layout/activation_layout.h"
#include "core/layout/backward_gradient_pages.h"
#include "core/layout/device_optimizer_bytes.h"
#include "core/layout/model_config.h"
#include "core/layout/parameter_table.h"
#include "core/layout/pipeline_partition.h"
#include "core/layout/pipeline_schedule.h"
#include "core/layout/zero3_prefetch.h"
#include "core/layout/zero3_regions.h"
#include "core/spec/precision.h"
#include "core/spec/training_support.h"

namespace dslaunch::plan {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

core::ParameterTable stage_parameter_table(const spec::ModelSpec& model,
                                           const spec::ParallelismSpec& parallel, int stage) {
  const core::ModelShard shard{
      .tensor_rank = 0,
      .tensor_size = parallel.tensor,
      .stage = stage,
      .stages = parallel.pipeline,
      .chunks = core::rank_chunks(stage_layers(model, parallel), parallel.pipeline, stage)};
  return core::ParameterTable(core::model_config(model, parallel.tensor), shard);
}

int64_t padded_vocab_size(const spec::ModelSpec& model, int tensor) {
  return core::model_config(model, tensor).padded_vocab_size;
}

std::vector<std::pair<int, int>> stage_layers(const spec::ModelSpec& model,
                                              const spec::ParallelismSpec& parallel) {
  return core::stage_layer_ranges(core::model_config(model, parallel.tensor), parallel);
}

int64_t parameters_per_rank(const spec::ModelSpec& model, const spec::ParallelismSpec& parallel,
                            int stage) {
  return stage_parameter_table(model, parallel, stage).total();
}

int64_t activation_bytes_per_rank(const spec::ModelSpec& model,
                                  const spec::ParallelismSpec& parallel,
                                  const spec::TrainingSpec& training, int64_t micro_batch,
                                  int64_t accumulation, int stage, spec::Device device) {
  // The CPU backend's attention goes a head at a time, the CUDA backend's a
  // head and a block of query rows at a time (kernels/backend.h).
  const core::AttentionScratch attention = device == spec::Device::kCpu
                                               ? core::AttentionScratch::kHeadProbabilities
                                               : core::AttentionScratch::kRowBlockProbabilities;
  const spec::ActivationCheckpointingSpec& checkpointing = training.activation_checkpointing;
  const int recomputed =
      checkpointing.enabled
          ? static_cast<int>(std::min<int64_t>(
                checkpointing.number_checkpoints.value_or(model.num_layers), model.num_layers))
          : 0;
  const core::ParameterTable table = stage_parameter_table(model, parallel, stage);
  const int chunks = table.chunk_count();
  const std::vector<core::ScheduledPass> schedule =
      chunks > 1 ? core::interleaved_schedule(accumulation, parallel.pipeline, stage, chunks)
      : parallel.pipeline > 1 ? core::one_f_one_b_schedule(accumulation, parallel.pipeline, stage)
                              : core::accumulation_schedule(accumulation);
  int64_t bytes = 0;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const core::LocalSizes sizes(table, chunk, recomputed, checkpointing.partition_activations);
    bytes += core::activation_bytes(sizes, micro_batch, model.seq_length,
                                    core::schedule_slots(schedule, chunk), attention,
                                    /*with_scratch=*/chunk == 0);  // the chunks share it
  }
  return bytes;
}

int64_t total_parameters(const spec::ModelSpec& model) {
  core::Gpt2Config unpadded = core::model_config(model, 1);
  unpadded.padded_vocab_size = unpadded.vocab_size;
  return core::ParameterTable(unpadded).total();
}

ModelStateBytes model_state_bytes(int64_t psi, const spec::TrainingSpec& training,
                                  int data_parallel, spec::Device device) {
  // 16-bit training keeps fp32 masters beside Adam's two moments (DeepSpeed's
  // 12 bytes per parameter).
  const bool mixed = training.fp16.enabled || training.bf16;
  const int64_t param_bytes = mixed && device == spec::Device::kCuda ? 2 : 4;
  const int64_t grad_bytes = param_bytes;
  const int64_t moment_bytes = 8;
  const int64_t master_bytes = mixed ? 4 : 0;
  const int stage = training.zero.stage;
  const int64_t partition = ceil_div(psi, data_parallel);
  const int64_t optimizer_elements = stage >= 1 ? partition : psi;

  ModelStateBytes bytes;
  bytes.parameters = (stage >= 3 ? partition : psi) * param_bytes;
  // Where the weights stay whole: below stage 3, and at stage 3 on one rank
  // that keeps its parameters in memory (worker/engine's ZeRO states).
  const bool whole_weights =
      stage < 3 ||
      (data_parallel == 1 && training.zero.offload_param.device != spec::OffloadDevice::kNvme);
  if (training.bf16 && device == spec::Device::kCpu && whole_weights) bytes.weight_copy = psi * 2;
  bytes.gradients = (stage >= 2 ? partition : psi) * grad_bytes;
  bytes.optimizer_states = optimizer_elements * (moment_bytes + master_bytes);
  // What the compressed optimizers keep beside Adam's moments (ZeRO 0, so
  // over the whole model): the worker error (ψ) and the server error (ψ/N);
  // 0/1 Adam the synchronised weights and the accumulated updates; 1-bit
  // LAMB the fresh variance and the momentum of the step before.
  const spec::OptimizerType type = training.optimizer.type;
  if (spec::compresses_communication(type) && data_parallel > 1) {
    bytes.optimizer_states += (psi + ceil_div(psi, data_parallel)) * 4;
  }
  if (type == spec::OptimizerType::kZeroOneAdam || type == spec::OptimizerType::kOneBitLamb) {
    bytes.optimizer_states += 2 * psi * 4;
  }

  const auto offload = [&bytes](spec::OffloadDevice device, int64_t& on_device, int64_t moved) {
    if (device == spec::OffloadDevice::kCpu) bytes.offloaded_to_host += moved;
    if (device == spec::OffloadDevice::kNvme) bytes.offloaded_to_nvme += moved;
    if (device != spec::OffloadDevice::kNone) on_device -= moved;
  };
  // Offloaded to host memory, the masters go with the moments (DeepSpeed's
  // ZeRO-Offload). To NVMe, the swap files take the moments; where the
  // gradients are partitioned (stages 2 and 3 over several ranks, or stage
  // 3 with its parameters on NVMe), the gradients and the masters too, and
  // otherwise those stay in memory.
  const spec::OffloadDevice optimizer_device = training.zero.offload_optimizer.device;
  const bool partitioned_gradients =
      stage >= 2 &&
      (data_parallel > 1 || training.zero.offload_param.device == spec::OffloadDevice::kNvme);
  const bool all_to_nvme = optimizer_device == spec::OffloadDevice::kNvme && partitioned_gradients;
  int64_t optimizer_moved = optimizer_device == spec::OffloadDevice::kNvme && !all_to_nvme
                                ? optimizer_elements * moment_bytes
                                : bytes.optimizer_states;
  // Partial offload (device cpu): `ratio` of the states go to host memory.
  if (optimizer_device == spec::OffloadDevice::kCpu) {
    optimizer_moved = static_cast<int64_t>(
        std::llround(training.zero.offload_optimizer.ratio * static_cast<double>(optimizer_moved)));
  }
  offload(optimizer_device, bytes.optimizer_states, optimizer_moved);
  offload(training.zero.offload_param.device, bytes.parameters, bytes.parameters);
  if (all_to_nvme) offload(optimizer_device, bytes.gradients, bytes.gradients);
  if (training.zero.offload_optimizer.device == spec::OffloadDevice::kNvme) {
    // As worker/engine/optimizer lays them out: each buffer holds one group
    // of both moments, each moment 4 KiB-aligned for O_DIRECT.
    const int64_t elements = stage >= 1 ? partition : psi;
    const int64_t group = std::max<int64_t>(1, std::min(training.zero.sub_group_size, elements));
    const int64_t groups = ceil_div(elements, group);
    const int64_t buffers =
        std::min<int64_t>(std::max(1, training.zero.offload_optimizer.buffer_count), groups);
    bytes.swap_buffers = buffers * 2 * ceil_div(group * 4, 4096) * 4096;
  }
  return bytes;
}

ModelStateBytes mirrored_state_bytes(int64_t psi, const spec::TrainingSpec& training,
                                     int data_parallel, const MirrorBytes& mirror) {
  const bool mixed = training.bf16 || training.fp16.enabled;
  ModelStateBytes bytes;
  const bool partial = spec::partial_optimizer_offload(training.zero);
  if (training.zero.offload_optimizer.device == spec::OffloadDevice::kNone || partial) {
    // The optimizer on the GPU keeps every state there
    // (worker/engine/device_model_state.cc): no host copies, but for
    // partial offload's share of the optimizer's states.
    const core::DType precision = spec::training_precision(training);
    const core::DeviceStateBytes device = core::device_state_bytes(
        {.parameters = psi,
         .ranks = data_parallel,
         .stage = training.zero.stage,
         .mixed = mixed,
         .bucket_elements = training.zero.reduce_bucket_size,
         .narrow_wire = spec::gradient_communication_type(training, precision) != core::DType::kF32,
         .host_optimizer_share = partial ? training.zero.offload_optimizer.ratio : 0.0});
    bytes.parameters = device.parameters;
    bytes.gradients = device.gradients;
    bytes.optimizer_states = device.optimizer_states;
    bytes.offloaded_to_host = device.host_optimizer_states;
    bytes.communication_buffers = device.communication_buffers;
    return bytes;
  }
  // The host backend multiplies nothing: no 16-bit copy of the weights.
  const ModelStateBytes host = model_state_bytes(psi, training, data_parallel, spec::Device::kCpu);
  bytes.parameters = mirror.parameters >= 0 ? mirror.parameters : psi * 4;
  bytes.gradients = mirror.gradients >= 0 ? mirror.gradients : psi * 4;
  bytes.offloaded_to_host =
      host.parameters + host.gradients + host.offloaded_to_host + host.swap_buffers;
  bytes.offloaded_to_nvme = host.offloaded_to_nvme;
  bytes.offloaded_to_host += host.optimizer_states;
  return bytes;
}

MirrorBytes mirror_bytes(const spec::ModelSpec& model, const spec::ParallelismSpec& parallel,
                         const spec::TrainingSpec& training, int data_parallel, int stage,
                         int64_t page_bytes) {
  const spec::ZeroSpec& zero = training.zero;
  MirrorBytes bytes;
  if (zero.offload_optimizer.device == spec::OffloadDevice::kNone ||
      spec::partial_optimizer_offload(zero)) {
    return bytes;
  }
  // As worker/engine/zero_model_state.cc partitions them: then the host
  // state reduces every micro-batch, and at stage 3 gathers the parameters.
  const bool partitioned = zero.stage >= 2 && (data_parallel > 1 || zero.offload_param.device ==
                                                                        spec::OffloadDevice::kNvme);
  if (!partitioned) return bytes;
  const core::ParameterTable table = stage_parameter_table(model, parallel, stage);
  // The host takes each range as backward reports it.
  bytes.gradients = core::backward_gradient_peak_bytes(table, 1, 0, page_bytes);
  if (zero.stage >= 3) {
    // The mirror uploads each region as the host acquires it: no prefetch.
    bytes.parameters = core::gathered_peak_bytes(
        core::Zero3Regions(table, zero.param_persistence_threshold), page_bytes, nullptr);
  }
  return bytes;
}

}  // namespace dslaunch::plan
