#pragma once

// The CUDA backend's matrix products: the descriptor the CPU backend hands to
// CBLAS (kernels/gemm_descriptor.h), in the same column-major form, handed
// to cuBLAS.

#include <cublas_v2.h>

#include "core/dtype.h"
#include "kernels/gemm_descriptor.h"

namespace dslaunch::kernels::cuda {

// The compute type that gives the backend's matmul precision on fp32
// matrices: kF32 multiplies in fp32 (no TF32); kBF16/kF16 round each operand
// to that format and accumulate in fp32 on tensor cores, as the CPU
// backend's RoundedGemm does. std::invalid_argument for another dtype.
cublasComputeType_t compute_type_for(core::DType matmul_precision);

// C = alpha · op(A) · op(B) + beta · C on device memory, fp32 matrices, on
// the handle's stream. Throws std::runtime_error with cuBLAS's status string
// when cuBLAS refuses.
void cublas_gemm(cublasHandle_t handle, const RowMajorGemm& gemm, const float* A, const float* B,
                 float* C, core::DType matmul_precision);

}  // namespace dslaunch::kernels::cuda
