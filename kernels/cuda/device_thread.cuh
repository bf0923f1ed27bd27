#pragma once

// The GPU side of the kernels in kernels/simt: DeviceThread gives a kernel
// body CUDA's builtins through the members the CPU emulator's
// EmulatedThread has (kernels/simt/emulator.h), and launch() runs a kernel
// struct with the shape it asks for.

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::cuda {

struct DeviceThread {
  static constexpr int kWarpSize = 32;

  __device__ int thread_index() const { return static_cast<int>(threadIdx.x); }
  __device__ int block_index() const { return static_cast<int>(blockIdx.x); }
  __device__ int block_size() const { return static_cast<int>(blockDim.x); }
  __device__ int grid_size() const { return static_cast<int>(gridDim.x); }
  __device__ int lane() const { return static_cast<int>(threadIdx.x) % kWarpSize; }
  __device__ int warp() const { return static_cast<int>(threadIdx.x) / kWarpSize; }
  __device__ void sync_threads() const { __syncthreads(); }
  __device__ float shfl_xor(float value, int lane_mask) const {
    return __shfl_xor_sync(0xffffffffu, value, lane_mask);
  }
  __device__ double shfl_xor(double value, int lane_mask) const {
    return __shfl_xor_sync(0xffffffffu, value, lane_mask);
  }
  template <class T>
  __device__ T* shared_memory() const {
    extern __shared__ __align__(16) unsigned char dynamic_shared[];
    return reinterpret_cast<T*>(dynamic_shared);
  }
};

template <class Kernel>
__global__ void run_kernel(const Kernel kernel) {
  DeviceThread thread;
  kernel(thread);
}

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// Launches `kernel` on `stream` with kernel.shape(); throws when CUDA
// refuses the launch.
template <class Kernel>
void launch(const Kernel& kernel, cudaStream_t stream) {
  const simt::LaunchShape shape = kernel.shape();
  run_kernel<<<shape.grid, shape.block, static_cast<size_t>(shape.shared_bytes), stream>>>(kernel);
  check_cuda(cudaGetLastError(), "kernel launch");
}

}  // namespace dslaunch::kernels::cuda
