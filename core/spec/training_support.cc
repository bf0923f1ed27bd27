#include "core/spec/training_support.h"

#include <fmt/format.h>

namespace dslaunch::spec {

bool cuda_training_built() { return false; }

std::string training_support_problem(const spec::JobSpec& spec) {
  const spec::TrainingSpec& training = spec.training;
  if (spec.cluster.device == spec::Device::kCuda && !cuda_training_built()) {
    return "the training engine runs on CPU so far (cluster.device: cpu): the CUDA kernels "
           "are built with --config=cuda and checked by `dslaunch selftest`, but training on "
           "GPUs also needs the NCCL communicator, not built yet";
  }
  if (training.zero.offload_optimizer.device == spec::OffloadDevice::kCpu) {
    return "offload_optimizer device cpu: on the CPU engine the optimizer states already live in "
           "host memory; it means something with the CUDA backend, not built yet. Use device "
           "nvme to take them out of memory, or remove offload_optimizer";
  }
  if (training.zero.offload_param.device == spec::OffloadDevice::kCpu) {
    return "offload_param device cpu: on the CPU engine the parameters already live in host "
           "memory; it means something with the CUDA backend, not built yet. Use device nvme to "
           "take them out of memory, or remove offload_param";
  }
  if (spec.model.dropout != 0) {
    return "dropout is not implemented yet; set model.dropout: 0";
  }
  return "";
}

}  // namespace dslaunch::spec
