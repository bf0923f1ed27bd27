#pragma once

// The CPU backend's kernels as free functions; kernels/backend.h states what
// each computes, the shapes and the accumulation rules. Each uses the calling
// thread's OpenMP thread count (set_compute_threads), and none of the loops
// here depends on that count for its result: the work is split into pieces
// that do not depend on it, and partial sums are combined in a fixed order.
// Products go through OpenBLAS (see Backend's comments for what that means
// for bitwise reproducibility).

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace dslaunch::kernels::cpu {

// encoder.cc
void encoder_forward(float* out, const int32_t* tokens, const float* wte,
                     Backend::VocabSlice vocab, const float* wpe, int64_t B, int64_t T, int64_t C);
void encoder_backward(float* dwte, Backend::VocabSlice vocab, float* dwpe, const float* dout,
                      const int32_t* tokens, int64_t B, int64_t T, int64_t C);

// layernorm.cc. `partials` is scratch for the per-block sums of dweight and
// dbias; it grows as needed.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, std::vector<double>& partials);

// matmul.cc: the linear layers and the tied output projection, in fp32, or
// with 16-bit operands through `rounded` when it is not null.
class RoundedGemm;
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC, RoundedGemm* rounded);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, RoundedGemm* rounded);
void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                    int64_t rows, int64_t ld, RoundedGemm* rounded);
void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                     const float* wte, int64_t N, int64_t C, int64_t rows, int64_t ld,
                     RoundedGemm* rounded);

// attention.cc
void attention_forward(float* out, float* scratch, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH);
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        int64_t B, int64_t T, int64_t C, int64_t NH);

// gelu.cc
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);

// softmax_crossentropy.cc
void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                  const int32_t* targets, int64_t N, int64_t V, int64_t Vp);
void vocab_parallel_max(float* row_max, const float* logits, int64_t N, int64_t V, int64_t Vp);
void vocab_parallel_sums(float* sums, const float* logits, const float* row_max,
                         const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t V,
                         int64_t Vp);
void vocab_parallel_softmax_loss(float* probs, float* losses, const float* logits,
                                 const float* row_max, const float* sums, int64_t N, int64_t V,
                                 int64_t Vp);
void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int32_t* targets, int64_t vocab_begin, int64_t N,
                                   int64_t V, int64_t Vp);

// adamw.cc, compiled without -ffp-contract=fast (see BUILD.bazel).
// rounded16, when not null (with rounded, in bf16): the same rounding's 16
// bits, the products' copy of the weights (RoundedGemm::weight_copy_for()).
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float* rounded,
                  uint16_t* rounded16, const Backend::AdamWParams& hyper);

// elementwise.cc
void residual_forward(float* out, const float* a, const float* b, int64_t n);
void residual_backward(float* da, float* db, const float* dout, int64_t n);
double sum_of_squares(const float* x, int64_t n);
void scale(float* x, int64_t n, float factor);
void divide(float* x, int64_t n, float divisor);
void fill(float* x, int64_t n, float value);

// convert.cc
void convert(void* out, core::DType out_dtype, const void* in, core::DType in_dtype, int64_t n);
void round_to(float* out, const float* in, int64_t n, core::DType dtype);
void mean(float* result, const float* x, int64_t n);

}  // namespace dslaunch::kernels::cpu
