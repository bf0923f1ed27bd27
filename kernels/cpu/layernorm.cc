#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vectorize.h"
#include "kernels/math/layernorm.h"

namespace dslaunch::kernels::cpu {
namespace {

// Rows per block of layernorm_backward: each block sums its rows' dweight and
// dbias contributions, and the blocks are combined in order, so the result
// does not depend on the thread count.
constexpr int64_t kRowBlock = 32;
// Columns per piece of the combining pass.
constexpr int64_t kColumnBlock = 256;

DSL_VECTOR_CLONES void normalize_row(float* out, float* mean_out, float* rstd_out, const float* x,
                                     const float* weight, const float* bias, int64_t C) {
  // Two passes in double: the row is in L1 by the second, and the variance
  // keeps its precision when the mean is large.
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < C; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(C);
  double squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t i = 0; i < C; ++i) {
    const double d = x[i] - mean;
    squares += d * d;
  }
  const auto m = static_cast<float>(mean);
  const float r = math::layernorm_rstd(squares, C);
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) out[i] = math::layernorm_output(x[i], m, r, weight[i], bias[i]);
  *mean_out = m;
  *rstd_out = r;
}

// dinp += the row's input gradient; dweight_sum/dbias_sum += its parameter
// gradients.
DSL_VECTOR_CLONES void backward_row(float* dinp, double* dweight_sum, double* dbias_sum,
                                    const float* dout, const float* x, const float* weight,
                                    float mean, float rstd, int64_t C) {
  double dnorm_sum = 0;
  double dnorm_norm_sum = 0;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
  for (int64_t i = 0; i < C; ++i) {
    const float norm = (x[i] - mean) * rstd;
    const float dnorm = weight[i] * dout[i];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
    dweight_sum[i] += norm * dout[i];
    dbias_sum[i] += dout[i];
  }
  const auto dnorm_mean = static_cast<float>(dnorm_sum / static_cast<double>(C));
  const auto dnorm_norm_mean = static_cast<float>(dnorm_norm_sum / static_cast<double>(C));
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) {
    const float norm = (x[i] - mean) * rstd;
    const float dnorm = weight[i] * dout[i];
    dinp[i] += math::layernorm_input_gradient(dnorm, norm, dnorm_mean, dnorm_norm_mean, rstd);
  }
}

DSL_VECTOR_CLONES void add_to(double* sum, const double* part, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) sum[i] += part[i];
}

DSL_VECTOR_CLONES void accumulate_as_float(float* dst, const double* src, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] += static_cast<float>(src[i]);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < N; ++row) {
    normalize_row(out + row * C, mean + row, rstd + row, inp + row * C, weight, bias, C);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, std::vector<double>& partials) {
  const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  // Per block: C sums for dweight, then C for dbias.
  if (static_cast<int64_t>(partials.size()) < blocks * 2 * C) partials.resize(blocks * 2 * C);
  double* const sums = partials.data();
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      double* dweight_sum = sums + block * 2 * C;
      double* dbias_sum = dweight_sum + C;
      std::fill(dweight_sum, dbias_sum + C, 0.0);
      const int64_t end = std::min(N, (block + 1) * kRowBlock);
      for (int64_t row = block * kRowBlock; row < end; ++row) {
        backward_row(dinp + row * C, dweight_sum, dbias_sum, dout + row * C, inp + row * C, weight,
                     mean[row], rstd[row], C);
      }
    }
    const int64_t column_blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp for schedule(static)
    for (int64_t piece = 0; piece < 2 * column_blocks; ++piece) {
      // Pieces [0, column_blocks) are dweight's columns, the rest dbias's.
      const int64_t offset = piece < column_blocks ? 0 : C;
      const int64_t c0 = (piece % column_blocks) * kColumnBlock;
      const int64_t width = std::min(kColumnBlock, C - c0);
      double total[kColumnBlock] = {};
      for (int64_t block = 0; block < blocks; ++block) {
        add_to(total, sums + block * 2 * C + offset + c0, width);
      }
      accumulate_as_float((offset == 0 ? dweight : dbias) + c0, total, width);
    }
  }
}

}  // namespace dslaunch::kernels::cpu
