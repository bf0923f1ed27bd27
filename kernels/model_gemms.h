#pragma once

// The matrix products of the model's linear layers and tied output layer
// (kernels/backend.h states each), as descriptors every backend runs: the
// CPU backend through CBLAS, the CUDA backend through cuBLAS. The backward
// products accumulate (beta 1), as the backward kernels do.

#include <cstdint>

#include "kernels/gemm_descriptor.h"

namespace dslaunch::kernels::model_gemms {

// out (N,OC) = inp (N,C) · weight (C,OC), added to out when it starts from
// the bias.
inline RowMajorGemm linear_forward(int64_t N, int64_t C, int64_t OC, bool onto_bias) {
  return {.M = N, .N = OC, .K = C, .lda = C, .ldb = OC, .ldc = OC, .beta = onto_bias ? 1.0f : 0.0f};
}

// dinp (N,C) += dout (N,OC) · weightᵀ.
inline RowMajorGemm linear_backward_input(int64_t N, int64_t C, int64_t OC) {
  return {.trans_b = Transpose::kYes,
          .M = N,
          .N = C,
          .K = OC,
          .lda = OC,
          .ldb = OC,
          .ldc = C,
          .beta = 1.0f};
}

// dweight (C,OC) += inpᵀ · dout (N,OC).
inline RowMajorGemm linear_backward_weight(int64_t N, int64_t C, int64_t OC) {
  return {.trans_a = Transpose::kYes,
          .M = C,
          .N = OC,
          .K = N,
          .lda = C,
          .ldb = OC,
          .ldc = OC,
          .beta = 1.0f};
}

// logits (N,rows) = inp (N,C) · wteᵀ, wte (rows,C); a row of logits is
// ld floats from the next (a vocabulary chunk's columns of wider logits).
inline RowMajorGemm logits_forward(int64_t N, int64_t C, int64_t rows, int64_t ld) {
  return {.trans_b = Transpose::kYes, .M = N, .N = rows, .K = C, .lda = C, .ldb = C, .ldc = ld};
}

// dinp (N,C) += dlogits (N,rows; rows ld apart) · wte.
inline RowMajorGemm logits_backward_input(int64_t N, int64_t C, int64_t rows, int64_t ld) {
  return {.M = N, .N = C, .K = rows, .lda = ld, .ldb = C, .ldc = C, .beta = 1.0f};
}

// dwte (rows,C) += dlogitsᵀ · inp (N,C).
inline RowMajorGemm logits_backward_weight(int64_t N, int64_t C, int64_t rows, int64_t ld) {
  return {.trans_a = Transpose::kYes,
          .M = rows,
          .N = C,
          .K = N,
          .lda = ld,
          .ldb = C,
          .ldc = C,
          .beta = 1.0f};
}

// Attention's products (kernels/backend.h), one head h at a time, batched
// over the B sequences: the head's q, k and v are (T, hs) slices of qkv
// (B,T,3C) with leading dimension 3C, at qkv + h·hs, + C and + 2C; its
// scores and probabilities att_h fill one head's buffer (B,T,T); its
// output and output gradient sit at out + h·hs in (B,T,C). The products
// cover the whole T×T square; the causal mask is the softmax's.
struct AttentionShape {
  int64_t B, T, C, NH;
  int64_t hs() const { return C / NH; }
  int64_t qkv_stride() const { return T * 3 * C; }  // from one sequence to the next
  int64_t att_stride() const { return T * T; }
  int64_t out_stride() const { return T * C; }
};

// att_h = scale · q · kᵀ.
inline RowMajorGemm attention_scores(const AttentionShape& s, float scale) {
  return {.trans_b = Transpose::kYes,
          .M = s.T,
          .N = s.T,
          .K = s.hs(),
          .lda = 3 * s.C,
          .ldb = 3 * s.C,
          .ldc = s.T,
          .alpha = scale,
          .batch = s.B,
          .stride_a = s.qkv_stride(),
          .stride_b = s.qkv_stride(),
          .stride_c = s.att_stride()};
}

// out_h = att_h · v.
inline RowMajorGemm attention_values(const AttentionShape& s) {
  return {.M = s.T,
          .N = s.hs(),
          .K = s.T,
          .lda = s.T,
          .ldb = 3 * s.C,
          .ldc = s.C,
          .batch = s.B,
          .stride_a = s.att_stride(),
          .stride_b = s.qkv_stride(),
          .stride_c = s.out_stride()};
}

// datt_h = dout_h · vᵀ.
inline RowMajorGemm attention_backward_probs(const AttentionShape& s) {
  return {.trans_b = Transpose::kYes,
          .M = s.T,
          .N = s.T,
          .K = s.hs(),
          .lda = s.C,
          .ldb = 3 * s.C,
          .ldc = s.T,
          .batch = s.B,
          .stride_a = s.out_stride(),
          .stride_b = s.qkv_stride(),
          .stride_c = s.att_stride()};
}

// dq_h += scale · dscores_h · k.
inline RowMajorGemm attention_backward_query(const AttentionShape& s, float scale) {
  return {.M = s.T,
          .N = s.hs(),
          .K = s.T,
          .lda = s.T,
          .ldb = 3 * s.C,
          .ldc = 3 * s.C,
          .alpha = scale,
          .beta = 1.0f,
          .batch = s.B,
          .stride_a = s.att_stride(),
          .stride_b = s.qkv_stride(),
          .stride_c = s.qkv_stride()};
}

// dk_h += scale · dscores_hᵀ · q.
inline RowMajorGemm attention_backward_key(const AttentionShape& s, float scale) {
  return {.trans_a = Transpose::kYes,
          .M = s.T,
          .N = s.hs(),
          .K = s.T,
          .lda = s.T,
          .ldb = 3 * s.C,
          .ldc = 3 * s.C,
          .alpha = scale,
          .beta = 1.0f,
          .batch = s.B,
          .stride_a = s.att_stride(),
          .stride_b = s.qkv_stride(),
          .stride_c = s.qkv_stride()};
}

// dv_h += att_hᵀ · dout_h.
inline RowMajorGemm attention_backward_value(const AttentionShape& s) {
  return {.trans_a = Transpose::kYes,
          .M = s.T,
          .N = s.hs(),
          .K = s.T,
          .lda = s.T,
          .ldb = s.C,
          .ldc = 3 * s.C,
          .beta = 1.0f,
          .batch = s.B,
          .stride_a = s.att_stride(),
          .stride_b = s.out_stride(),
          .stride_c = s.qkv_stride()};
}

}  // namespace dslaunch::kernels::model_gemms
