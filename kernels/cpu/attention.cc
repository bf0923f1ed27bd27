#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/cpu/vectorize.h"

namespace dslaunch::kernels::cpu {
namespace {

using enum Transpose;

// The products run over blocks of query rows, each only as far right as the
// causal mask lets its last row see: about half of the T×T work is skipped
// at long sequences while every product stays large enough for OpenBLAS.
constexpr int64_t kRowBlock = 64;

// One (batch, head): its q, k, v (T, hs) read straight out of qkv (B,T,3C)
// with leading dimension 3C.
struct Head {
  const float* q;
  const float* k;
  const float* v;
  int64_t ld;

  Head(const float* qkv, int64_t b, int64_t h, int64_t T, int64_t C, int64_t hs)
      : q(qkv + b * T * 3 * C + h * hs), k(q + C), v(q + 2 * C), ld(3 * C) {}
};

// row[0, n) = softmax(row[0, n)); row[n, T) = 0.
DSL_VECTOR_CLONES void causal_softmax_row(float* row, int64_t n, int64_t T) {
  softmax_row(row, row, n, T);
}

// The softmax's backward pass over a row of width n whose probabilities are
// att (zero beyond the diagonal): d[j] = att[j] · (d[j] - Σ att·d).
DSL_VECTOR_CLONES void softmax_backward_row(float* d, const float* att, int64_t n) {
  double dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += att[j] * d[j];
  const auto dot_f = static_cast<float>(dot);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) d[j] = att[j] * (d[j] - dot_f);
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // One (batch, head) per iteration; OpenBLAS runs single-threaded inside a
  // parallel region, so each product is computed the same way whatever the
  // thread count.
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const Head head(qkv, bh / NH, bh % NH, T, C, hs);
    float* a = att + bh * T * T;
    float* o = out + (bh / NH) * T * C + (bh % NH) * hs;
    for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, T - r0);
      const int64_t visible = r0 + rows;
      sgemm({.trans_b = kYes, .M = rows, .N = visible, .K = hs, .lda = head.ld, .ldb = head.ld,
             .ldc = T, .alpha = scale},
            head.q + r0 * head.ld, head.k, a + r0 * T);
      for (int64_t t = r0; t < r0 + rows; ++t) causal_softmax_row(a + t * T, t + 1, T);
      sgemm({.M = rows, .N = hs, .K = visible, .lda = T, .ldb = head.ld, .ldc = C}, a + r0 * T,
            head.v, o + r0 * C);
    }
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Each (batch, head) writes only its own columns of dqkv: no races.
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const Head head(qkv, bh / NH, bh % NH, T, C, hs);
    float* dq = dqkv + (head.q - qkv);
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* a = att + bh * T * T;
    const float* d_o = dout + (bh / NH) * T * C + (bh % NH) * hs;
    // datt, then in place the gradient of the scaled scores.
    float* ds = scratch + bh * T * T;
    for (int64_t r0 = 0; r0 < T; r0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, T - r0);
      const int64_t visible = r0 + rows;
      sgemm({.trans_b = kYes, .M = rows, .N = visible, .K = hs, .lda = C, .ldb = head.ld, .ldc = T},
            d_o + r0 * C, head.v, ds + r0 * T);
      // Over the block's whole width: att is zero beyond the diagonal, so is
      // the gradient there, which the column pass below reads.
      for (int64_t t = r0; t < r0 + rows; ++t) softmax_backward_row(ds + t * T, a + t * T, visible);
      sgemm({.M = rows, .N = hs, .K = visible, .lda = T, .ldb = head.ld, .ldc = head.ld,
             .alpha = scale, .beta = 1.0f},
            ds + r0 * T, head.k, dq + r0 * head.ld);
    }
    // Key and value row j receive from the query rows t >= j only.
    for (int64_t j0 = 0; j0 < T; j0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, T - j0);
      const int64_t seen_by = T - j0;
      sgemm({.trans_a = kYes, .M = rows, .N = hs, .K = seen_by, .lda = T, .ldb = C,
             .ldc = head.ld, .beta = 1.0f},
            a + j0 * T + j0, d_o + j0 * C, dv + j0 * head.ld);
      sgemm({.trans_a = kYes, .M = rows, .N = hs, .K = seen_by, .lda = T, .ldb = head.ld,
             .ldc = head.ld, .alpha = scale, .beta = 1.0f},
            ds + j0 * T + j0, head.q + j0 * head.ld, dk + j0 * head.ld);
    }
  }
}

}  // namespace dslaunch::kernels::cpu
