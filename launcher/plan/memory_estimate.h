#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"

namespace dslaunch::plan {

// Megatron pads the vocabulary to a multiple of divisible_by * tensor so the
// embedding splits evenly across tensor ranks.
int64_t padded_vocab_size(const spec::ModelSpec& model, int tensor);

// The transformer blocks [begin, end) of each pipeline stage (of each
// virtual stage, with parallelism.virtual_stages), as
// parallelism.pipeline_partition splits them (core/layout/pipeline_partition).
std::vector<std::pair<int, int>> stage_layers(const spec::ModelSpec& model,
                                              const spec::ParallelismSpec& parallel);

// The parameter table of tensor rank 0 of pipeline stage `stage`.
core::ParameterTable stage_parameter_table(const spec::ModelSpec& model,
                                           const spec::ParallelismSpec& parallel, int stage);

// Parameters one rank of pipeline stage `stage` holds before ZeRO (Ψ for that
// model-parallel shard): what core::ParameterTable lays out for it (Megatron's
// split; the stage's blocks from stage_layers()).
int64_t parameters_per_rank(const spec::ModelSpec& model, const spec::ParallelismSpec& parallel,
                            int stage);

// The activation bytes one rank of pipeline stage `stage` holds: each model
// chunk's buffers for the micro-batches its schedule keeps in flight
// (pipeline - stage under 1F1B, at most `accumulation`; 1 without a
// pipeline; what core/layout/pipeline_schedule gives the interleaved one),
// shrunk by activation checkpointing, from the same layout the model
// allocates by (core/layout/activation_layout), with the attention
// scratch of `device`'s backend.
int64_t activation_bytes_per_rank(const spec::ModelSpec& model,
                                  const spec::ParallelismSpec& parallel,
                                  const spec::TrainingSpec& training, int64_t micro_batch,
                                  int64_t accumulation, int stage, spec::Device device);

// The whole model's parameter count (no padding of the vocabulary), from the
// same table.
int64_t total_parameters(const spec::ModelSpec& model);

// Model-state bytes of one rank, by where they live.
struct ModelStateBytes {
  int64_t parameters = 0;         // on the device
  int64_t gradients = 0;          // on the device
  int64_t optimizer_states = 0;   // on the device
  // Optimizer states (and stage-3 parameters) moved to CPU memory; on the
  // GPU path (mirrored_state_bytes) every model state in host memory, swap
  // buffers included, or with partial offload (ratio below 1) that share of
  // the optimizer's states.
  int64_t offloaded_to_host = 0;
  // Moved to NVMe: optimizer states, stage-3 parameters, partitioned gradients.
  int64_t offloaded_to_nvme = 0;
  // In memory for offloaded optimizer states: offload_optimizer nvme's swap
  // buffers (buffer_count groups of sub_group_size elements, both moments).
  int64_t swap_buffers = 0;
  // bf16 training on the CPU engine where the weights stay whole (ZeRO
  // stages 0-2, and stage 3 on one rank without parameter offload): the
  // matrix products' 16-bit copy of them, 2 bytes a parameter, which the
  // ranks keep where the CPU multiplies bf16 (AVX512_BF16 or AMX) and count
  // here whatever the CPU.
  int64_t weight_copy = 0;
  // Training on GPUs with every state there (mirrored_state_bytes): the
  // data group's reduction buffers in GPU memory.
  int64_t communication_buffers = 0;
  int64_t device_total() const {
    return parameters + gradients + optimizer_states + swap_buffers + weight_copy +
           communication_buffers;
  }
};

// The ZeRO paper's accounting for Ψ parameters: mixed precision (fp16/bf16)
// Adam holds 2Ψ parameters + 2Ψ gradients + 12Ψ optimizer states (fp32 master
// weights, momentum, variance); fp32 Adam 4Ψ + 4Ψ + 8Ψ. Stage 1 divides the
// optimizer states by the data-parallel size, stage 2 the gradients too,
// stage 3 the parameters too (partitions rounded up). Offload moves the
// optimizer states (and, at stage 3, the parameters) to host memory or NVMe;
// optimizer states on NVMe stream through swap buffers that stay in memory,
// and partitioned gradients go to NVMe with them.
// 16-bit weights and gradients take 2 bytes each on a GPU; the CPU backend
// holds them widened to fp32 (their values exactly), 4 bytes each.
ModelStateBytes model_state_bytes(int64_t psi, const spec::TrainingSpec& training,
                                  int data_parallel, spec::Device device = spec::Device::kCuda);

// What the GPU's mirror of host-held model states holds (training on GPUs
// with offload_optimizer; worker/engine/device_mirror.h), where it holds
// less than whole fp32 buffers; -1: whole (4Ψ).
struct MirrorBytes {
  // ZeRO stage 3 where the host state gathers the parameters around their
  // use (gathered_mirror.h, core::gathered_peak_bytes).
  int64_t parameters = -1;
  // Where the host state reduces every micro-batch (stages 2-3 over several
  // ranks, or with offload_param nvme): backward's gradient pages, each
  // given back once the host has taken its floats
  // (core::backward_gradient_peak_bytes, a bucket of one float).
  int64_t gradients = -1;
};

// What training on a GPU holds today, for a job
// spec::device_training_problem accepts. Without offload_optimizer every
// model state is on the GPU (core::device_state_bytes: fp32 parameters and
// whole fp32 gradients, 4Ψ + 4Ψ whatever the precision, where stages 2-3
// over several ranks keep only their partition of the gradients (backward's
// buffer is a workspace: device_workspace_bytes_per_rank), the optimizer's
// states of this rank's partition, the data group's reduction buffers),
// nothing in host memory. With offload_optimizer (worker/engine/
// device_mirror.h) the GPU holds the fp32 parameters and gradients, whole
// or as `mirror` says; the other model states are in host memory as the
// CPU engine keeps them (in offloaded_to_host, or offloaded_to_nvme where
// they go to NVMe, swap buffers included).
ModelStateBytes mirrored_state_bytes(int64_t psi, const spec::TrainingSpec& training,
                                     int data_parallel, const MirrorBytes& mirror = {});

// The mirror's bytes for pipeline stage `stage`, in pages of `page_bytes`
// (all -1 without offload_optimizer).
MirrorBytes mirror_bytes(const spec::ModelSpec& model, const spec::ParallelismSpec& parallel,
                         const spec::TrainingSpec& training, int data_parallel, int stage,
                         int64_t page_bytes);

}  // namespace dslaunch::plan
