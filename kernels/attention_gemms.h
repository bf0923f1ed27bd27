#pragma once

// The products of causal self-attention computed a block of query rows at a
// time for every sequence at once (the CUDA backend's attention,
// simt/simt_backend.h): one head's scores, probabilities and their
// gradients for `rows` query rows from position `first` of each of the B
// sequences, in a scratch block (B, attention_block_rows(T), T); each
// product batched over the sequences. qkv (B,T,3C) is laid out [q | k | v], head h
// holding channels h·hs .. h·hs+hs of each; out and dout (B,T,C).
// Pointers to head h's q, k, v, out and scratch are the caller's: the
// descriptors give the shapes, leading dimensions and batch strides.

#include <cstdint>

#include "core/layout/attention_scratch.h"
#include "kernels/gemm_descriptor.h"

namespace dslaunch::kernels::attention_gemms {

struct RowBlock {
  int64_t B, T, C, hs;
  int64_t first, rows;

  int64_t seen() const { return first + rows; }  // keys the block's last row sees
  int64_t qkv_ld() const { return 3 * C; }
  int64_t qkv_stride() const { return T * 3 * C; }
  // From one sequence's block of scores to the next.
  int64_t scratch_stride() const { return core::attention_block_rows(T) * T; }
};

// scores (rows, seen) = scale · q[first, first + rows) · k[0, seen)ᵀ.
inline RowMajorGemm scores(const RowBlock& r, float scale) {
  return {.trans_b = Transpose::kYes,
          .M = r.rows,
          .N = r.seen(),
          .K = r.hs,
          .lda = r.qkv_ld(),
          .ldb = r.qkv_ld(),
          .ldc = r.T,
          .alpha = scale,
          .batch = r.B,
          .stride_a = r.qkv_stride(),
          .stride_b = r.qkv_stride(),
          .stride_c = r.scratch_stride()};
}

// out[first, first + rows) = probs (rows, seen) · v[0, seen).
inline RowMajorGemm output(const RowBlock& r) {
  return {.M = r.rows,
          .N = r.hs,
          .K = r.seen(),
          .lda = r.T,
          .ldb = r.qkv_ld(),
          .ldc = r.C,
          .batch = r.B,
          .stride_a = r.scratch_stride(),
          .stride_b = r.qkv_stride(),
          .stride_c = r.T * r.C};
}

// dprobs (rows, seen) = dout[first, first + rows) · v[0, seen)ᵀ.
inline RowMajorGemm probability_gradients(const RowBlock& r) {
  return {.trans_b = Transpose::kYes,
          .M = r.rows,
          .N = r.seen(),
          .K = r.hs,
          .lda = r.C,
          .ldb = r.qkv_ld(),
          .ldc = r.T,
          .batch = r.B,
          .stride_a = r.T * r.C,
          .stride_b = r.qkv_stride(),
          .stride_c = r.scratch_stride()};
}

// dq[first, first + rows) += scale · dscores (rows, seen) · k[0, seen).
inline RowMajorGemm query_gradients(const RowBlock& r, float scale) {
  return {.M = r.rows,
          .N = r.hs,
          .K = r.seen(),
          .lda = r.T,
          .ldb = r.qkv_ld(),
          .ldc = r.qkv_ld(),
          .alpha = scale,
          .beta = 1.0f,
          .batch = r.B,
          .stride_a = r.scratch_stride(),
          .stride_b = r.qkv_stride(),
          .stride_c = r.qkv_stride()};
}

// dk[0, seen) += scale · dscoresᵀ (seen, rows) · q[first, first + rows).
inline RowMajorGemm key_gradients(const RowBlock& r, float scale) {
  return {.trans_a = Transpose::kYes,
          .M = r.seen(),
          .N = r.hs,
          .K = r.rows,
          .lda = r.T,
          .ldb = r.qkv_ld(),
          .ldc = r.qkv_ld(),
          .alpha = scale,
          .beta = 1.0f,
          .batch = r.B,
          .stride_a = r.scratch_stride(),
          .stride_b = r.qkv_stride(),
          .stride_c = r.qkv_stride()};
}

// dv[0, seen) += probsᵀ (seen, rows) · dout[first, first + rows).
inline RowMajorGemm value_gradients(const RowBlock& r) {
  return {.trans_a = Transpose::kYes,
          .M = r.seen(),
          .N = r.hs,
          .K = r.rows,
          .lda = r.T,
          .ldb = r.C,
          .ldc = r.qkv_ld(),
          .beta = 1.0f,
          .batch = r.B,
          .stride_a = r.scratch_stride(),
          .stride_b = r.T * r.C,
          .stride_c = r.qkv_stride()};
}

}  // namespace dslaunch::kernels::attention_gemms
