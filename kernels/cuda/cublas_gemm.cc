#include "kernels/cuda/cublas_gemm.h"

#include <stdexcept>
#include <string>

namespace dslaunch::kernels::cuda {
namespace {

void run(cublasHandle_t handle, const RowMajorGemm& gemm, const void* A, const void* B, float* C,
         cudaDataType_t operands, cublasComputeType_t compute) {
  const ColumnMajorGemm g = to_column_major(gemm);
  if (g.m == 0 || g.n == 0) return;
  const auto op = [](Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; };
  const cublasStatus_t status = cublasGemmStridedBatchedEx_64(
      handle, op(g.trans_first), op(g.trans_second), g.m, g.n, g.k, &g.alpha, B, operands,
      g.ld_first, g.stride_first, A, operands, g.ld_second, g.stride_second, &g.beta, C, CUDA_R_32F,
      g.ldc, g.stride_c, g.batch, compute, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS matrix product failed: ") +
                             cublasGetStatusString(status));
  }
}

}  // namespace

void cublas_gemm(cublasHandle_t handle, const RowMajorGemm& gemm, const float* A, const float* B,
                 float* C) {
  run(handle, gemm, A, B, C, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC);
}

void cublas_gemm_16(cublasHandle_t handle, const RowMajorGemm& gemm, const uint16_t* A,
                    const uint16_t* B, float* C, core::DType operands) {
  if (operands != core::DType::kBF16 && operands != core::DType::kF16) {
    throw std::invalid_argument("cuBLAS 16-bit products: operands in " +
                                std::string(core::dtype_name(operands)));
  }
  run(handle, gemm, A, B, C, operands == core::DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F,
      CUBLAS_COMPUTE_32F);
}

}  // namespace dslaunch::kernels::cuda
