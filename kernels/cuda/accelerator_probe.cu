// The CUDA build's accelerator probe: versions of the driver, runtime, cuBLAS
// and NCCL, and one kernel launched on every visible GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <library_types.h>
#include <nccl.h>

#include <string>

#include "kernels/accelerator.h"

namespace dslaunch::kernels {
namespace {

constexpr int kProbeThreads = 256;

// Writes i * 3 + 1 to element i, so a missing or foreign kernel image (which
// leaves the buffer untouched or fails the launch) cannot pass.
__global__ void probe_fill(int* out) {
  const int i = static_cast<int>(threadIdx.x);
  out[i] = i * 3 + 1;
}

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cuda_error(const char* what, cudaError_t status) {
  return std::string(what) + ": " + cudaGetErrorString(status);
}

// Runs probe_fill on the current device and checks every value it wrote.
std::string run_probe_kernel() {
  int* device_buffer = nullptr;
  cudaError_t status = cudaMalloc(&device_buffer, kProbeThreads * sizeof(int));
  if (status != cudaSuccess) return cuda_error("cudaMalloc", status);
  probe_fill<<<1, kProbeThreads>>>(device_buffer);
  status = cudaGetLastError();
  int host_buffer[kProbeThreads] = {};
  if (status == cudaSuccess) {
    status = cudaMemcpy(host_buffer, device_buffer, sizeof(host_buffer), cudaMemcpyDeviceToHost);
  }
  cudaFree(device_buffer);
  if (status != cudaSuccess) return cuda_error("probe kernel", status);
  for (int i = 0; i < kProbeThreads; ++i) {
    if (host_buffer[i] != i * 3 + 1) return "probe kernel wrote wrong values";
  }
  return "";
}

}  // namespace

AcceleratorReport probe_accelerators() {
  AcceleratorReport report;
  report.cuda_backend_built = true;

  int runtime_version = 0;
  if (cudaRuntimeGetVersion(&runtime_version) == cudaSuccess) {
    report.cuda_runtime_version = cuda_version_string(runtime_version);
  }
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
    report.cublas_version =
        std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) == ncclSuccess) {
    // NCCL >= 2.9 encodes 10000 * major + 100 * minor + patch.
    report.nccl_version = std::to_string(nccl_version / 10000) + "." +
                          std::to_string((nccl_version % 10000) / 100) + "." +
                          std::to_string(nccl_version % 100);
  }

  int driver_version = 0;
  cudaError_t status = cudaDriverGetVersion(&driver_version);
  if (status != cudaSuccess || driver_version == 0) {
    report.error = "no CUDA driver on this machine";
    return report;
  }
  report.cuda_driver_version = cuda_version_string(driver_version);

  int device_count = 0;
  status = cudaGetDeviceCount(&device_count);
  if (status != cudaSuccess) {
    report.error = cuda_error("cudaGetDeviceCount", status);
    return report;
  }
  for (int index = 0; index < device_count; ++index) {
    GpuInfo gpu;
    gpu.index = index;
    cudaDeviceProp props{};
    status = cudaGetDeviceProperties(&props, index);
    if (status != cudaSuccess) {
      gpu.error = cuda_error("cudaGetDeviceProperties", status);
      report.gpus.push_back(gpu);
      continue;
    }
    gpu.name = props.name;
    gpu.compute_capability_major = props.major;
    gpu.compute_capability_minor = props.minor;
    gpu.total_memory_bytes = static_cast<int64_t>(props.totalGlobalMem);
    gpu.multiprocessors = props.multiProcessorCount;
    status = cudaSetDevice(index);
    gpu.error = status == cudaSuccess ? run_probe_kernel() : cuda_error("cudaSetDevice", status);
    gpu.kernel_ran = gpu.error.empty();
    report.gpus.push_back(gpu);
  }
  return report;
}

}  // namespace dslaunch::kernels
