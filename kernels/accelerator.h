#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dslaunch::kernels {

struct GpuInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int64_t total_memory_bytes = 0;
  int multiprocessors = 0;
  // A kernel from this binary ran on the device and wrote the expected
  // values: the binary carries code (SASS or PTX) this GPU can run.
  bool kernel_ran = false;
  std::string error;  // why the device could not be used, if it could not
};

// What the CUDA backend finds on this machine.
struct AcceleratorReport {
  bool cuda_backend_built = false;  // false in the default CPU-only build
  std::string cuda_runtime_version;
  std::string cuda_driver_version;
  std::string cublas_version;
  std::string nccl_version;
  std::vector<GpuInfo> gpus;
  std::string error;  // set when the driver or runtime could not be queried
};

// Queries the CUDA driver, cuBLAS and NCCL, and runs a one-block kernel on
// every visible GPU. Never throws; a machine without a driver or GPU yields an
// empty `gpus` list and `error` saying why. Not thread-safe with other CUDA
// initialisation.
AcceleratorReport probe_accelerators();

}  // namespace dslaunch::kernels
