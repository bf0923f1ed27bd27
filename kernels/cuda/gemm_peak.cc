#include "kernels/cuda/gemm_peak.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/half_precision.h"

namespace dslaunch::kernels::cuda {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(status));
  }
}

// Device memory, a cuBLAS handle and an event, each freed on every path.
struct DeviceMemory {
  explicit DeviceMemory(size_t bytes) { check(cudaMalloc(&data, bytes), "cudaMalloc"); }
  ~DeviceMemory() { cudaFree(data); }
  void* data = nullptr;
};
struct CublasHandle {
  CublasHandle() { check(cublasCreate(&handle), "cublasCreate"); }
  ~CublasHandle() { cublasDestroy(handle); }
  cublasHandle_t handle = nullptr;
};
struct Event {
  Event() { check(cudaEventCreate(&event), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(event); }
  cudaEvent_t event = nullptr;
};

// n·n random values in [-1, 1) as the operand format.
std::vector<uint8_t> random_matrix(int n, bool bf16, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const size_t count = static_cast<size_t>(n) * n;
  std::vector<uint8_t> bytes(count * (bf16 ? 2 : 4));
  for (size_t i = 0; i < count; ++i) {
    const float value = uniform(generator);
    if (bf16) {
      reinterpret_cast<uint16_t*>(bytes.data())[i] = float_to_bf16(value);
    } else {
      reinterpret_cast<float*>(bytes.data())[i] = value;
    }
  }
  return bytes;
}

}  // namespace

double measure_gemm_tflops(bool bf16, int n, int repeats) {
  const std::vector<uint8_t> a = random_matrix(n, bf16, 1), b = random_matrix(n, bf16, 2);
  DeviceMemory da(a.size()), db(b.size()), dc(static_cast<size_t>(n) * n * sizeof(float));
  check(cudaMemcpy(da.data, a.data(), a.size(), cudaMemcpyHostToDevice), "copying A");
  check(cudaMemcpy(db.data, b.data(), b.size(), cudaMemcpyHostToDevice), "copying B");
  const CublasHandle cublas;
  const Event start, stop;
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType operand = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  const auto product = [&] {
    check(cublasGemmEx(cublas.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, da.data, operand,
                       n, db.data, operand, n, &beta, dc.data, CUDA_R_32F, n, compute,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  };
  product();  // warm up: cuBLAS picks and loads its kernel
  double best_ms = 1e30;
  for (int i = 0; i < repeats; ++i) {
    check(cudaEventRecord(start.event), "cudaEventRecord");
    product();
    check(cudaEventRecord(stop.event), "cudaEventRecord");
    check(cudaEventSynchronize(stop.event), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.event, stop.event), "cudaEventElapsedTime");
    best_ms = std::min(best_ms, static_cast<double>(ms));
  }
  return 2.0 * n * n * static_cast<double>(n) / (best_ms * 1e-3) / 1e12;
}

}  // namespace dslaunch::kernels::cuda
