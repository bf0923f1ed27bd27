#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/rounded_gemm.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {
namespace {

using enum Transpose;

// Columns per piece of the bias gradient's column sums.
constexpr int64_t kColumnBlock = 256;

DSL_VECTOR_CLONES void add_row(double* sum, const float* row, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) sum[i] += row[i];
}

// dbias (OC) += the column sums of dout (N,OC), each summed in row order in
// double whatever the thread count.
void accumulate_column_sums(float* dbias, const float* dout, int64_t N, int64_t OC) {
  const int64_t column_blocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < column_blocks; ++block) {
    const int64_t c0 = block * kColumnBlock;
    const int64_t width = std::min(kColumnBlock, OC - c0);
    double sum[kColumnBlock] = {};
    for (int64_t row = 0; row < N; ++row) add_row(sum, dout + row * OC + c0, width);
    for (int64_t i = 0; i < width; ++i) dbias[c0 + i] += static_cast<float>(sum[i]);
  }
}

// C = op(A) · op(B) + beta · C (beta 0 or 1): fp32, or with operands
// rounded to 16 bits when `rounded` is given.
void gemm(RoundedGemm* rounded, Transpose trans_a, Transpose trans_b, int64_t M, int64_t N,
          int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  if (rounded != nullptr) {
    rounded->run(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta != 0.0f, C, ldc);
  } else {
    sgemm(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  }
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC, RoundedGemm* rounded) {
  if (bias != nullptr) {
    // Starting from the bias and accumulating the product (beta = 1) writes
    // out once instead of adding the bias in a second pass.
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < N; ++row) std::memcpy(out + row * OC, bias, OC * sizeof(float));
  }
  gemm(rounded, kNo, kNo, N, OC, C, inp, C, weight, OC, bias != nullptr ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, RoundedGemm* rounded) {
  if (dinp != nullptr) gemm(rounded, kNo, kYes, N, C, OC, dout, OC, weight, OC, 1.0f, dinp, C);
  gemm(rounded, kYes, kNo, C, OC, N, inp, C, dout, OC, 1.0f, dweight, OC);
  if (dbias != nullptr) accumulate_column_sums(dbias, dout, N, OC);
}

void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                    int64_t Vp, RoundedGemm* rounded) {
  gemm(rounded, kNo, kYes, N, Vp, C, inp, C, wte, C, 0.0f, logits, Vp);
}

void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                     const float* wte, int64_t N, int64_t C, int64_t Vp, RoundedGemm* rounded) {
  gemm(rounded, kNo, kNo, N, C, Vp, dlogits, Vp, wte, C, 1.0f, dinp, C);
  gemm(rounded, kYes, kNo, Vp, C, N, dlogits, Vp, inp, C, 1.0f, dwte, C);
}

}  // namespace dslaunch::kernels::cpu
