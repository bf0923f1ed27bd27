#pragma once

// One description of a matrix product, shared by every backend: the model
// states its products on row-major matrices (RowMajorGemm), and both BLAS
// interfaces it runs on, CBLAS on the CPU and cuBLAS on a GPU, take the same
// column-major form of it (to_column_major). The descriptors the model uses
// (model_gemms.h) are tested through CBLAS against products written out
// element by element, so a wrong transpose, size or leading dimension shows
// on the CPU before it reaches cuBLAS.

#include <cstdint>

namespace dslaunch::kernels {

enum class Transpose { kNo, kYes };

// C = alpha · op(A) · op(B) + beta · C on row-major matrices: op(A) is
// (M,K), op(B) (K,N), C (M,N). A is stored (M,K), or (K,M) when transposed,
// with lda elements from one row to the next (lda >= its row width); B and C
// likewise. `batch` products at element strides stride_a, stride_b and
// stride_c from one to the next.
struct RowMajorGemm {
  Transpose trans_a = Transpose::kNo;
  Transpose trans_b = Transpose::kNo;
  int64_t M = 0;
  int64_t N = 0;
  int64_t K = 0;
  int64_t lda = 0;
  int64_t ldb = 0;
  int64_t ldc = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  int64_t batch = 1;
  int64_t stride_a = 0;
  int64_t stride_b = 0;
  int64_t stride_c = 0;
};

// The same product as a column-major BLAS call (cublasGemmStridedBatchedEx,
// cblas_sgemm with CblasColMajor). A row-major matrix read column-major is
// its transpose, so C = op(A)·op(B) is computed as Cᵀ = op(B)ᵀ·op(A)ᵀ: the
// first operand is the row-major B, the second the row-major A, and m, n
// are N, M.
struct ColumnMajorGemm {
  Transpose trans_first = Transpose::kNo;
  Transpose trans_second = Transpose::kNo;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t ld_first = 0;
  int64_t ld_second = 0;
  int64_t ldc = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  int64_t batch = 1;
  int64_t stride_first = 0;
  int64_t stride_second = 0;
  int64_t stride_c = 0;
};

// Throws std::invalid_argument naming the field when a size is negative, the
// batch is below 1, or a leading dimension is smaller than its stored row's
// width (what BLAS rejects).
void check_gemm(const RowMajorGemm& gemm);

// Checks (check_gemm) and converts.
ColumnMajorGemm to_column_major(const RowMajorGemm& gemm);

}  // namespace dslaunch::kernels
