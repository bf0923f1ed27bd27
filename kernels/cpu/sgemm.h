#pragma once

#include <cblas.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/gemm_descriptor.h"

namespace dslaunch::kernels::cpu {

// Runs a product through OpenBLAS in the column-major form cuBLAS gets too
// (gemm_descriptor.h): A, B and C as the row-major descriptor names them.
// Called inside an OpenMP parallel region it runs on the calling thread
// alone; outside one, on the OpenMP pool.
inline void sgemm(const RowMajorGemm& gemm, const float* A, const float* B, float* C) {
  const ColumnMajorGemm g = to_column_major(gemm);
  if (g.m == 0 || g.n == 0) return;
  const auto op = [](Transpose t) { return t == Transpose::kYes ? CblasTrans : CblasNoTrans; };
  const auto blas_int = [](int64_t value) {
    if (value > std::numeric_limits<blasint>::max()) {
      throw std::invalid_argument("matrix product: size " + std::to_string(value) +
                                  " exceeds OpenBLAS's integer");
    }
    return static_cast<blasint>(value);
  };
  for (int64_t i = 0; i < g.batch; ++i) {
    cblas_sgemm(CblasColMajor, op(g.trans_first), op(g.trans_second), blas_int(g.m), blas_int(g.n),
                blas_int(g.k), g.alpha, B + i * g.stride_first, blas_int(g.ld_first),
                A + i * g.stride_second, blas_int(g.ld_second), g.beta, C + i * g.stride_c,
                blas_int(g.ldc));
  }
}

}  // namespace dslaunch::kernels::cpu
