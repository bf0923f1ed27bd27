#pragma once

// The CUDA backend's matrix products: the descriptor the CPU backend hands to
// CBLAS (kernels/gemm_descriptor.h), in the same column-major form, handed
// to cuBLAS.

#include <cublas_v2.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/gemm_descriptor.h"

namespace dslaunch::kernels::cuda {

// C = alpha · op(A) · op(B) + beta · C on device memory, fp32 matrices
// multiplied in fp32 (no TF32), on the handle's stream. Throws
// std::runtime_error with cuBLAS's status string when cuBLAS refuses.
void cublas_gemm(cublasHandle_t handle, const RowMajorGemm& gemm, const float* A, const float* B,
                 float* C);

// The same with A and B in `operands` (bf16 or fp16, as 16-bit values) on
// tensor cores, accumulating into fp32 C in fp32. std::invalid_argument for
// another dtype.
void cublas_gemm_16(cublasHandle_t handle, const RowMajorGemm& gemm, const uint16_t* A,
                    const uint16_t* B, float* C, core::DType operands);

}  // namespace dslaunch::kernels::cuda
