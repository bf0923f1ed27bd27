#include "core/spec/training_support.h"

#include <fmt/format.h>

namespace dslaunch::spec {

bool cuda_training_built() {
#ifdef DSLAUNCH_CUDA_TRAINING
  return true;
#else
  return false;
#endif
}

std::string device_training_problem(const spec::JobSpec& spec) {
  const spec::ZeroSpec& zero = spec.training.zero;
  // The mirror hands the host only what a step's last micro-batch reduces,
  // which ZeRO stages 0-2 do with Adam; Lamb and the 1-bit optimizers see
  // the whole model's gradients at other points.
  if (spec.training.optimizer.type == spec::OptimizerType::kLamb ||
      spec::compresses_communication(spec.training.optimizer.type)) {
    return "training on GPUs takes Adam or AdamW; use cluster.device: cpu for Lamb and the "
           "1-bit optimizers";
  }
  // Offloaded whole, the model states are the host engine's, and so are the
  // parameters' partitions and ZeRO++'s collectives (gathered_mirror.h).
  // Partial offload (device cpu, ratio below 1) keeps them on the GPU.
  const bool offloaded = zero.offload_optimizer.device != spec::OffloadDevice::kNone;
  const bool partial = partial_optimizer_offload(zero);
  if (zero.offload_param.device != spec::OffloadDevice::kNone && !offloaded) {
    return "offload_param on GPUs takes offload_optimizer too (the parameters' partitions are "
           "updated where the optimizer's states live): add zero_optimization.offload_optimizer "
           "with device cpu or nvme, or remove offload_param";
  }
  if (zero.offload_param.device != spec::OffloadDevice::kNone && partial) {
    return fmt::format(
        "offload_param on GPUs takes every optimizer state offloaded (the parameters' partitions "
        "are updated where those live), but offload_optimizer.ratio {} keeps some on the GPU: "
        "remove ratio, or remove offload_param",
        zero.offload_optimizer.ratio);
  }
  if ((!offloaded || partial) &&
      (zero.quantized_weights || zero.quantized_gradients || zero.hpz_partition_size > 1)) {
    return "ZeRO++ (zero_quantized_weights, zero_quantized_gradients, zero_hpz_partition_size) "
           "with the optimizer on the GPU is not built yet: remove those keys, add "
           "offload_optimizer (without ratio), or use cluster.device: cpu";
  }
  return "";
}

std::string training_support_problem(const spec::JobSpec& spec) {
  const spec::TrainingSpec& training = spec.training;
  if (spec.cluster.device == spec::Device::kCuda) {
    if (!cuda_training_built()) {
      return "this build trains on CPU only (cluster.device: cpu): training on GPUs needs a "
             "build with --config=cuda";
    }
    if (std::string problem = device_training_problem(spec); !problem.empty()) return problem;
  } else {
    if (training.zero.offload_optimizer.device == spec::OffloadDevice::kCpu) {
      return "offload_optimizer device cpu: on the CPU engine the optimizer states already live "
             "in host memory; it means something on GPUs (cluster.device: cuda). Use device "
             "nvme to take them out of memory, or remove offload_optimizer";
    }
    if (training.zero.offload_param.device == spec::OffloadDevice::kCpu) {
      return "offload_param device cpu: on the CPU engine the parameters already live in host "
             "memory; it means something on GPUs (cluster.device: cuda). Use device nvme to take "
             "them out of memory, or remove offload_param";
    }
  }
  if (spec.model.dropout != 0) {
    return "dropout is not implemented yet; set model.dropout: 0";
  }
  return "";
}

}  // namespace dslaunch::spec
