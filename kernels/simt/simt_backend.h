#pragma once

// Every kernel of kernels/backend.h built from kernels/simt's kernels and
// model_gemms.h's products, written once for two devices: the CUDA backend
// (kernels/cuda, on the GPU) and the emulated backend (emulated_backend.h,
// the same code on the CPU emulator of CUDA's thread model). A Device
// derives from SimtBackend<Device> (CRTP) and provides memory, streams,
// matmul_kernel()/set_matmul_precision(), and
//   template <class Kernel> void launch_kernel(const Kernel& kernel);
//   void run_gemm(const RowMajorGemm& product, const float* A, const float* B, float* C);
//                 // at the matmul precision
//   void run_gemm_fp32(const RowMajorGemm& product, const float* A, const float* B, float* C);
//   double* scratch_doubles(int64_t count);  // device memory for partial sums,
//                                            // valid until the next call
// (public, or with SimtBackend<Device> a friend).
// Compiled by nvcc for the GPU and by the host compiler for the emulator.

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/layout/attention_scratch.h"
#include "kernels/attention_gemms.h"
#include "kernels/backend.h"
#include "kernels/gemm_descriptor.h"
#include "kernels/math/adamw.h"
#include "kernels/model_gemms.h"
#include "kernels/simt/attention_softmax_kernels.h"
#include "kernels/simt/column_sum_kernels.h"
#include "kernels/simt/cross_entropy_kernels.h"
#include "kernels/simt/elementwise_kernels.h"
#include "kernels/simt/encoder_kernels.h"
#include "kernels/simt/layernorm_kernels.h"
#include "kernels/simt/precision_kernels.h"
#include "kernels/simt/reduction_kernels.h"

namespace dslaunch::kernels::simt {

template <class Device>
class SimtBackend : public Backend {
 public:
  void convert(void* out, core::DType out_dtype, const void* in, core::DType in_dtype,
               int64_t n) override {
    if (!convertible(out_dtype) || !convertible(in_dtype)) {
      throw std::invalid_argument("convert: only fp32, bf16 and fp16, not " +
                                  std::string(core::dtype_name(in_dtype)) + " to " +
                                  std::string(core::dtype_name(out_dtype)));
    }
    if (n > 0) launch(Convert{out, out_dtype, in, in_dtype, n});
  }
  void round_to(float* out, const float* in, int64_t n, core::DType dtype) override {
    if (n > 0) launch(RoundTo{out, in, n, dtype});
  }
  void fill(float* x, int64_t n, float value) override {
    if (n > 0) launch(Fill{x, n, value});
  }
  void mean(float* result, const float* x, int64_t n) override {
    double* partials = scratch(kMaxPartialSums);
    const PartialSums partial{partials, x, n, false};
    launch(partial);
    launch(FinishSum{partials, partial.shape().grid, nullptr, result, n});
  }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, VocabSlice vocab,
                       const float* wpe, int64_t B, int64_t T, int64_t C) override {
    launch(EncoderForward{out, tokens, wte, vocab.begin, vocab.rows, wpe, B, T, C});
  }
  void encoder_backward(float* dwte, VocabSlice vocab, float* dwpe, const float* dout,
                        const int32_t* tokens, int64_t B, int64_t T, int64_t C) override {
    if (dwpe != nullptr) launch(EncoderBackwardPositions{dwpe, dout, B, T, C});
    // The tokens come back to the host (B·T ints) to be grouped by row:
    // then one thread per (row, column) adds its positions in order.
    const int64_t BT = B * T;
    std::vector<int32_t> host_tokens(BT);
    this->copy_device_to_host(host_tokens.data(), tokens, BT * 4);
    const TokenGroups groups = group_by_row(host_tokens.data(), BT, vocab.begin, vocab.rows);
    if (groups.rows.empty()) return;
    const auto count = [](const std::vector<int32_t>& v) { return static_cast<int64_t>(v.size()); };
    const int64_t ints = count(groups.rows) + count(groups.offsets) + count(groups.positions);
    auto* rows = reinterpret_cast<int32_t*>(scratch((ints + 1) / 2));
    int32_t* offsets = rows + groups.rows.size();
    int32_t* positions = offsets + groups.offsets.size();
    this->copy_host_to_device(rows, groups.rows.data(), count(groups.rows) * 4);
    this->copy_host_to_device(offsets, groups.offsets.data(), count(groups.offsets) * 4);
    this->copy_host_to_device(positions, groups.positions.data(), count(groups.positions) * 4);
    launch(EncoderBackwardTokens{dwte, dout, rows, offsets, positions, count(groups.rows), C});
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t N, int64_t C) override {
    launch(LayernormForward{out, mean, rstd, inp, weight, bias, N, C});
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t N, int64_t C) override {
    launch(LayernormBackwardInput{dinp, dout, inp, weight, mean, rstd, N, C});
    column_sums(LayernormParamTerm{dout, inp, mean, rstd, C}, N, C, {dweight, dbias});
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t N, int64_t C, int64_t OC) override {
    if (bias != nullptr) launch(BroadcastRows{out, bias, N, OC});
    gemm(model_gemms::linear_forward(N, C, OC, bias != nullptr), inp, weight, out);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t N, int64_t C,
                       int64_t OC) override {
    if (dinp != nullptr) gemm(model_gemms::linear_backward_input(N, C, OC), dout, weight, dinp);
    gemm(model_gemms::linear_backward_weight(N, C, OC), inp, dout, dweight);
    if (dbias != nullptr) column_sums(PlainTerm{dout, OC}, N, OC, {dbias});
  }
  void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                      int64_t rows, int64_t ld) override {
    gemm(model_gemms::logits_forward(N, C, rows, ld), inp, wte, logits);
  }
  void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                       const float* wte, int64_t N, int64_t C, int64_t rows, int64_t ld) override {
    gemm(model_gemms::logits_backward_input(N, C, rows, ld), dlogits, wte, dinp);
    gemm(model_gemms::logits_backward_weight(N, C, rows, ld), dlogits, inp, dwte);
  }

  // Through the products, one head and one block of query rows of every
  // sequence at a time (attention_gemms.h), with the causal softmax and its
  // backward as row kernels (attention_softmax_kernels.h); the scratch
  // holds the block's probabilities and their gradient. The products are
  // fp32 whatever the matmul precision, as the CPU backend's attention's.
  core::AttentionScratch attention_scratch() const override {
    return core::AttentionScratch::kRowBlockProbabilities;
  }
  void attention_forward(float* out, float* scratch, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override {
    for_each_row_block(
        B, T, C, NH, [&](const attention_gemms::RowBlock& r, int64_t h, float scale) {
          const float* q = qkv + h * r.hs;
          gemm_fp32(attention_gemms::scores(r, scale), q + r.first * 3 * C, q + C, scratch);
          launch(CausalSoftmaxRows{scratch, score_rows(r)});
          gemm_fp32(attention_gemms::output(r), scratch, q + 2 * C, out + h * r.hs + r.first * C);
        });
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override {
    float* const probs = scratch;
    float* const grads = scratch + B * core::attention_block_rows(T) * T;
    for_each_row_block(
        B, T, C, NH, [&](const attention_gemms::RowBlock& r, int64_t h, float scale) {
          const float* q = qkv + h * r.hs;
          const float* d_o = dout + h * r.hs + r.first * C;
          float* dq = dqkv + h * r.hs;
          // The probabilities again, their gradient, in place the (unscaled)
          // scores' gradient, then dq, dk and dv.
          gemm_fp32(attention_gemms::scores(r, scale), q + r.first * 3 * C, q + C, probs);
          launch(CausalSoftmaxRows{probs, score_rows(r)});
          gemm_fp32(attention_gemms::probability_gradients(r), d_o, q + 2 * C, grads);
          launch(CausalSoftmaxBackwardRows{grads, probs, score_rows(r)});
          gemm_fp32(attention_gemms::query_gradients(r, scale), grads, q + C, dq + r.first * 3 * C);
          gemm_fp32(attention_gemms::key_gradients(r, scale), grads, q + r.first * 3 * C, dq + C);
          gemm_fp32(attention_gemms::value_gradients(r), probs, d_o, dq + 2 * C);
        });
  }

  void gelu_forward(float* out, const float* inp, int64_t n) override {
    if (n > 0) launch(GeluForward{out, inp, n});
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    if (n > 0) launch(GeluBackward{dinp, inp, dout, n});
  }
  void residual_forward(float* out, const float* a, const float* b, int64_t n) override {
    if (n > 0) launch(ResidualForward{out, a, b, n});
  }
  void residual_backward(float* da, float* db, const float* dout, int64_t n) override {
    if (n > 0) launch(ResidualBackward{da, db, dout, n});
  }

  void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                    const int32_t* targets, int64_t N, int64_t V,
                                    int64_t Vp) override {
    if (N > 0) launch(SoftmaxCrossentropyForward{probs, losses, logits, targets, N, V, Vp});
  }
  void vocab_parallel_max(float* row_max, const float* logits, int64_t N, int64_t V,
                          int64_t Vp) override {
    if (N > 0) launch(VocabParallelMax{row_max, logits, N, V, Vp});
  }
  void vocab_parallel_sums(float* sums, const float* logits, const float* row_max,
                           const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t V,
                           int64_t Vp) override {
    if (N > 0) {
      launch(VocabParallelSums{sums, logits, row_max, targets, vocab_begin, N, V, Vp});
    }
  }
  void vocab_parallel_softmax_loss(float* probs, float* losses, const float* logits,
                                   const float* row_max, const float* sums, int64_t N, int64_t V,
                                   int64_t Vp) override {
    if (N > 0) {
      launch(VocabParallelSoftmaxLoss{probs, losses, logits, row_max, sums, N, V, Vp});
    }
  }
  void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                     const int32_t* targets, int64_t vocab_begin, int64_t N,
                                     int64_t V, int64_t Vp) override {
    if (N * V > 0) {
      launch(CrossentropySoftmaxBackward{dlogits, dlosses, probs, targets, vocab_begin, N, V, Vp});
    }
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                    const AdamWParams& hyper, float* rounded) override {
    if (n > 0) {
      launch(AdamWUpdate{params, grads, m, v, n, math::adam_scalars(hyper), rounded,
                         hyper.rounded_dtype});
    }
  }
  double sum_of_squares(const float* x, int64_t n) override {
    double* partials = scratch(kMaxPartialSums + 1);
    double* device_total = partials + kMaxPartialSums;
    const PartialSums partial{partials, x, n, true};
    launch(partial);
    launch(FinishSum{partials, partial.shape().grid, device_total, nullptr, n});
    double total = 0;
    this->copy_device_to_host(&total, device_total, sizeof total);
    return total;
  }
  void scale(float* x, int64_t n, float factor) override {
    if (n > 0) launch(Scale{x, n, factor});
  }
  void divide(float* x, int64_t n, float divisor) override {
    if (n > 0) launch(Divide{x, n, divisor});
  }

 private:
  static bool convertible(core::DType dtype) {
    return dtype == core::DType::kF32 || dtype == core::DType::kBF16 || dtype == core::DType::kF16;
  }

  double* scratch(int64_t count) { return static_cast<Device*>(this)->scratch_doubles(count); }

  // fn(block, h, scale) for each head h and each block of query rows, in
  // order (the key and value gradients add up over the blocks).
  template <class Fn>
  static void for_each_row_block(int64_t B, int64_t T, int64_t C, int64_t NH, const Fn& fn) {
    if (NH <= 0 || C % NH != 0) {
      throw std::invalid_argument("attention: " + std::to_string(C) +
                                  " channels do not split into " + std::to_string(NH) + " heads");
    }
    if (B * T == 0) return;
    const int64_t hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    const int64_t block = core::attention_block_rows(T);
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t first = 0; first < T; first += block) {
        fn(attention_gemms::RowBlock{B, T, C, hs, first, std::min(block, T - first)}, h, scale);
      }
    }
  }
  static ScoreRows score_rows(const attention_gemms::RowBlock& r) {
    return {r.B, r.rows, r.first, r.T, r.scratch_stride()};
  }

  // out[k] (width) += the column sums of term's values k over `rows` rows.
  template <class Term>
  void column_sums(const Term& term, int64_t rows, int64_t width,
                   const std::array<float*, Term::kValues>& out) {
    if (rows == 0 || width == 0) return;
    const int64_t chunks = column_sum_chunks(rows);
    double* partials = scratch(chunks * Term::kValues * width);
    launch(PartialColumnSums<Term>{partials, term, rows, width});
    FinishColumnSums<Term::kValues> finish{partials, chunks, width, {}};
    std::copy(out.begin(), out.end(), finish.out);
    launch(finish);
  }

  template <class Kernel>
  void launch(const Kernel& kernel) {
    static_cast<Device*>(this)->launch_kernel(kernel);
  }
  // The linear layers' and the output layer's products, at the precision
  // set_matmul_precision() chose.
  void gemm(const RowMajorGemm& product, const float* A, const float* B, float* C) {
    static_cast<Device*>(this)->run_gemm(product, A, B, C);
  }
  void gemm_fp32(const RowMajorGemm& product, const float* A, const float* B, float* C) {
    static_cast<Device*>(this)->run_gemm_fp32(product, A, B, C);
  }
};

}  // namespace dslaunch::kernels::simt
