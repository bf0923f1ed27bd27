#include "kernels/cuda/cublas_gemm.h"

#include <stdexcept>
#include <string>

namespace dslaunch::kernels::cuda {

cublasComputeType_t compute_type_for(core::DType matmul_precision) {
  switch (matmul_precision) {
    case core::DType::kF32:
      return CUBLAS_COMPUTE_32F_PEDANTIC;
    case core::DType::kBF16:
      return CUBLAS_COMPUTE_32F_FAST_16BF;
    case core::DType::kF16:
      return CUBLAS_COMPUTE_32F_FAST_16F;
    default:
      throw std::invalid_argument("cuBLAS products: no compute type for " +
                                  std::string(core::dtype_name(matmul_precision)));
  }
}

void cublas_gemm(cublasHandle_t handle, const RowMajorGemm& gemm, const float* A, const float* B,
                 float* C, core::DType matmul_precision) {
  const ColumnMajorGemm g = to_column_major(gemm);
  if (g.m == 0 || g.n == 0) return;
  const auto op = [](Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; };
  const cublasStatus_t status = cublasGemmStridedBatchedEx_64(
      handle, op(g.trans_first), op(g.trans_second), g.m, g.n, g.k, &g.alpha, B, CUDA_R_32F,
      g.ld_first, g.stride_first, A, CUDA_R_32F, g.ld_second, g.stride_second, &g.beta, C,
      CUDA_R_32F, g.ldc, g.stride_c, g.batch, compute_type_for(matmul_precision),
      CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS matrix product failed: ") +
                             cublasGetStatusString(status));
  }
}

}  // namespace dslaunch::kernels::cuda
