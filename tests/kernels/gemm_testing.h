#pragma once

// What the matrix-product tests share: random operands, a descriptor with
// padded leading dimensions and a batch, the product written out from its
// row-major definition in double, and the error measure.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/gemm_descriptor.h"

namespace dslaunch::kernels::testing {

inline std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = uniform(rng);
  return values;
}

// max |actual - expected| over the largest |expected|.
inline double relative_error(const std::vector<float>& actual,
                             const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return scale == 0 ? worst : worst / scale;
}

// `batch` (M,K)·(K,N) products, op(A) and op(B) as the transposes say, every
// leading dimension `pad` past its row's width, the items one after another.
inline RowMajorGemm padded_gemm(Transpose ta, Transpose tb, int64_t M, int64_t N, int64_t K,
                                int64_t pad, int64_t batch, float alpha, float beta) {
  RowMajorGemm g{.trans_a = ta,
                 .trans_b = tb,
                 .M = M,
                 .N = N,
                 .K = K,
                 .lda = (ta == Transpose::kYes ? M : K) + pad,
                 .ldb = (tb == Transpose::kYes ? K : N) + pad,
                 .ldc = N + pad,
                 .alpha = alpha,
                 .beta = beta,
                 .batch = batch};
  g.stride_a = (ta == Transpose::kYes ? K : M) * g.lda;
  g.stride_b = (tb == Transpose::kYes ? N : K) * g.ldb;
  g.stride_c = M * g.ldc;
  return g;
}

// C = alpha · op(A) · op(B) + beta · C straight from the row-major
// definition, one batch item after another, each operand element passed
// through `operand` first (a rounding, or none).
template <class Operand>
std::vector<double> reference_product(const RowMajorGemm& g, const std::vector<float>& A,
                                      const std::vector<float>& B, const std::vector<float>& C0,
                                      const Operand& operand) {
  std::vector<double> C(C0.begin(), C0.end());
  for (int64_t item = 0; item < g.batch; ++item) {
    const float* a = A.data() + item * g.stride_a;
    const float* b = B.data() + item * g.stride_b;
    double* c = C.data() + item * g.stride_c;
    for (int64_t i = 0; i < g.M; ++i) {
      for (int64_t j = 0; j < g.N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < g.K; ++k) {
          const float a_ik = g.trans_a == Transpose::kYes ? a[k * g.lda + i] : a[i * g.lda + k];
          const float b_kj = g.trans_b == Transpose::kYes ? b[j * g.ldb + k] : b[k * g.ldb + j];
          sum += static_cast<double>(operand(a_ik)) * operand(b_kj);
        }
        c[i * g.ldc + j] = g.alpha * sum + g.beta * c[i * g.ldc + j];
      }
    }
  }
  return C;
}

}  // namespace dslaunch::kernels::testing
