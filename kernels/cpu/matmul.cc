#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
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

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC) {
  if (bias != nullptr) {
    // Starting from the bias and accumulating the product (beta = 1) writes
    // out once instead of adding the bias in a second pass.
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < N; ++row) std::memcpy(out + row * OC, bias, OC * sizeof(float));
  }
  sgemm(kNo, kNo, N, OC, C, 1.0f, inp, C, weight, OC, bias != nullptr ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC) {
  if (dinp != nullptr) sgemm(kNo, kYes, N, C, OC, 1.0f, dout, OC, weight, OC, 1.0f, dinp, C);
  sgemm(kYes, kNo, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, OC);
  if (dbias != nullptr) accumulate_column_sums(dbias, dout, N, OC);
}

void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                    int64_t Vp) {
  sgemm(kNo, kYes, N, Vp, C, 1.0f, inp, C, wte, C, 0.0f, logits, Vp);
}

void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                     const float* wte, int64_t N, int64_t C, int64_t Vp) {
  sgemm(kNo, kNo, N, C, Vp, 1.0f, dlogits, Vp, wte, C, 1.0f, dinp, C);
  sgemm(kYes, kNo, Vp, C, N, 1.0f, dlogits, Vp, inp, C, 1.0f, dwte, C);
}

}  // namespace dslaunch::kernels::cpu
