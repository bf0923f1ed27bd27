#include "launcher/plan/device_choice.h"

#include <fmt/format.h>

namespace dslaunch::plan {

DeviceChoice choose_device(int visible_gpus, bool cuda_training_built,
                           const std::string& gpu_problem) {
  if (visible_gpus <= 0) {
    return {spec::Device::kCpu, "cpu: no GPU visible on this machine (nvidia-smi found none)"};
  }
  if (!cuda_training_built) {
    return {spec::Device::kCpu,
            fmt::format("cpu: {} GPU(s) visible, but this build trains on CPU only (training "
                        "on GPUs needs a build with --config=cuda)",
                        visible_gpus)};
  }
  if (!gpu_problem.empty()) {
    return {spec::Device::kCpu,
            fmt::format("cpu: {} GPU(s) visible, but this job needs what training on GPUs does "
                        "not do yet ({})",
                        visible_gpus, gpu_problem)};
  }
  return {spec::Device::kCuda, fmt::format("cuda: {} GPU(s) visible", visible_gpus)};
}

}  // namespace dslaunch::plan
