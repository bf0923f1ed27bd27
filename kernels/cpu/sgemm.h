#pragma once

#include <cblas.h>

#include <cstdint>

namespace dslaunch::kernels::cpu {

enum class Transpose { kNo, kYes };

// Row-major C (M,N) = alpha · op(A) (M,K) · op(B) (K,N) + beta · C through
// OpenBLAS, with 64-bit sizes. Called inside an OpenMP parallel region it
// runs on the calling thread alone; outside one, on the OpenMP pool.
inline void sgemm(Transpose trans_a, Transpose trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                  float* C, int64_t ldc) {
  const auto op = [](Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; };
  cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), alpha, A, static_cast<blasint>(lda),
              B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

}  // namespace dslaunch::kernels::cpu
