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

}  // namespace dslaunch::kernels::model_gemms
