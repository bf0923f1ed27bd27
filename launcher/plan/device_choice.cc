#include "launcher/plan/device_choice.h"

#include <fmt/format.h>

namespace dslaunch::plan {

DeviceChoice choose_device(int visible_gpus, bool cuda_training_built) {
  if (visible_gpus <= 0) {
    return {spec::Device::kCpu, "cpu: no GPU visible on this machine (nvidia-smi found none)"};
  }
  if (!cuda_training_built) {
    return {spec::Device::kCpu,
            fmt::format("cpu: {} GPU(s) visible, but this build trains on CPU only (training "
                        "on GPUs is not built yet; `dslaunch selftest` checks the CUDA kernels)",
                        visible_gpus)};
  }
  return {spec::Device::kCuda, fmt::format("cuda: {} GPU(s) visible", visible_gpus)};
}

}  // namespace dslaunch::plan
