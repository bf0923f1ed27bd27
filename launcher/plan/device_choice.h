#pragma once

#include <string>

#include "core/spec/job_spec.h"

namespace dslaunch::plan {

// What cluster.device: auto comes to, and why in words ("cuda: 8 GPUs
// visible", "cpu: no GPU visible (nvidia-smi found none)").
struct DeviceChoice {
  spec::Device device = spec::Device::kCpu;
  std::string reason;
};

// cuda where this machine shows GPUs, this build trains on them and the
// job asks nothing of them that training on GPUs lacks (`gpu_problem`,
// spec::device_training_problem, empty); cpu otherwise. `visible_gpus` is
// what the machine probe found here.
DeviceChoice choose_device(int visible_gpus, bool cuda_training_built,
                           const std::string& gpu_problem);

}  // namespace dslaunch::plan
