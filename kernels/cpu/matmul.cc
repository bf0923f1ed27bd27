#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/rounded_gemm.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/model_gemms.h"

namespace dslaunch::kernels::cpu {
namespace {

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

// Runs a product in fp32, or with operands rounded to 16 bits when
// `rounded` is given.
void gemm(RoundedGemm* rounded, const RowMajorGemm& product, const float* A, const float* B,
          float* C) {
  if (rounded != nullptr) {
    rounded->run(product, A, B, C);
  } else {
    sgemm(product, A, B, C);
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
  gemm(rounded, model_gemms::linear_forward(N, C, OC, bias != nullptr), inp, weight, out);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, RoundedGemm* rounded) {
  if (dinp != nullptr) gemm(rounded, model_gemms::linear_backward_input(N, C, OC), dout, weight, dinp);
  gemm(rounded, model_gemms::linear_backward_weight(N, C, OC), inp, dout, dweight);
  if (dbias != nullptr) accumulate_column_sums(dbias, dout, N, OC);
}

void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                    int64_t rows, int64_t ld, RoundedGemm* rounded) {
  gemm(rounded, model_gemms::logits_forward(N, C, rows, ld), inp, wte, logits);
}

void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                     const float* wte, int64_t N, int64_t C, int64_t rows, int64_t ld,
                     RoundedGemm* rounded) {
  gemm(rounded, model_gemms::logits_backward_input(N, C, rows, ld), dlogits, wte, dinp);
  gemm(rounded, model_gemms::logits_backward_weight(N, C, rows, ld), dlogits, inp, dwte);
}

}  // namespace dslaunch::kernels::cpu
