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

// The head's probabilities of query rows [r0, r0 + rows) of one sequence,
// into att (T,T) at row r0: scaled scores, then the causal softmax; the
// backward pass recomputes them with the same products, to the same bits.
void probabilities(float* att, const Head& head, int64_t r0, int64_t rows, int64_t T, int64_t hs,
                   float scale) {
  const int64_t visible = r0 + rows;
  sgemm({.trans_b = kYes,
         .M = rows,
         .N = visible,
         .K = hs,
         .lda = head.ld,
         .ldb = head.ld,
         .ldc = T,
         .alpha = scale},
        head.q + r0 * head.ld, head.k, att + r0 * T);
  for (int64_t t = r0; t < r0 + rows; ++t) causal_softmax_row(att + t * T, t + 1, T);
}

}  // namespace

// Both passes run the heads one at a time, each over its (sequence, block of
// query rows) pairs in parallel: a head's probabilities of sequence b sit at
// scratch + b·T·T, so the scratch holds one head's, never all of them. A
// block's work grows with its distance from the start of the sequence (the
// causal mask), so the costliest blocks are handed out first, one at a time.
// Each writes rows of its own, and OpenBLAS runs single-threaded inside a
// parallel region, so the results are the same whatever the thread count
// and whichever thread takes a block.

void attention_forward(float* out, float* scratch, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t blocks = (T + kRowBlock - 1) / kRowBlock;
  for (int64_t h = 0; h < NH; ++h) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < B * blocks; ++item) {
      const int64_t b = item % B;
      const int64_t r0 = (blocks - 1 - item / B) * kRowBlock;
      const int64_t rows = std::min(kRowBlock, T - r0);
      const Head head(qkv, b, h, T, C, hs);
      float* att = scratch + b * T * T;
      probabilities(att, head, r0, rows, T, hs, scale);
      sgemm({.M = rows, .N = hs, .K = r0 + rows, .lda = T, .ldb = head.ld, .ldc = C}, att + r0 * T,
            head.v, out + b * T * C + h * hs + r0 * C);
    }
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, int64_t B,
                        int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t blocks = (T + kRowBlock - 1) / kRowBlock;
  float* const probs = scratch;                // (B,T,T): the head's probabilities
  float* const dscores = scratch + B * T * T;  // (B,T,T): their gradient, then the scores'
  for (int64_t h = 0; h < NH; ++h) {
    // Query rows: the probabilities again, their gradient datt = dout · vᵀ,
    // in place the scaled scores' gradient, and dq.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < B * blocks; ++item) {
      const int64_t b = item % B;
      const int64_t r0 = (blocks - 1 - item / B) * kRowBlock;
      const int64_t rows = std::min(kRowBlock, T - r0);
      const int64_t visible = r0 + rows;
      const Head head(qkv, b, h, T, C, hs);
      float* att = probs + b * T * T;
      float* ds = dscores + b * T * T;
      const float* d_o = dout + b * T * C + h * hs;
      float* dq = dqkv + (head.q - qkv);
      probabilities(att, head, r0, rows, T, hs, scale);
      sgemm({.trans_b = kYes, .M = rows, .N = visible, .K = hs, .lda = C, .ldb = head.ld, .ldc = T},
            d_o + r0 * C, head.v, ds + r0 * T);
      // Over the block's whole width: att is zero beyond the diagonal, so is
      // the gradient there, which the key and value pass below reads.
      for (int64_t t = r0; t < r0 + rows; ++t)
        softmax_backward_row(ds + t * T, att + t * T, visible);
      sgemm({.M = rows,
             .N = hs,
             .K = visible,
             .lda = T,
             .ldb = head.ld,
             .ldc = head.ld,
             .alpha = scale,
             .beta = 1.0f},
            ds + r0 * T, head.k, dq + r0 * head.ld);
    }
    // Key and value row j receive from the query rows t >= j only.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < B * blocks; ++item) {
      const int64_t b = item % B;
      const int64_t j0 = item / B * kRowBlock;
      const int64_t rows = std::min(kRowBlock, T - j0);
      const int64_t seen_by = T - j0;
      const Head head(qkv, b, h, T, C, hs);
      const float* att = probs + b * T * T;
      const float* ds = dscores + b * T * T;
      const float* d_o = dout + b * T * C + h * hs;
      float* dk = dqkv + (head.k - qkv);
      float* dv = dqkv + (head.v - qkv);
      sgemm({.trans_a = kYes,
             .M = rows,
             .N = hs,
             .K = seen_by,
             .lda = T,
             .ldb = C,
             .ldc = head.ld,
             .beta = 1.0f},
            att + j0 * T + j0, d_o + j0 * C, dv + j0 * head.ld);
      sgemm({.trans_a = kYes,
             .M = rows,
             .N = hs,
             .K = seen_by,
             .lda = T,
             .ldb = head.ld,
             .ldc = head.ld,
             .alpha = scale,
             .beta = 1.0f},
            ds + j0 * T + j0, head.q + j0 * head.ld, dk + j0 * head.ld);
    }
  }
}

}  // namespace dslaunch::kernels::cpu
