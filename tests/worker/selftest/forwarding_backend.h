#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace dslaunch::testing {

using kernels::Backend;

// A backend that hands every call to another one: tests derive from it to
// break one kernel of a working backend on purpose.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  bool memory_is_host() const override { return inner_->memory_is_host(); }
  core::AttentionScratch attention_scratch() const override { return inner_->attention_scratch(); }
  void* allocate(int64_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* data) override { inner_->deallocate(data); }
  void copy_host_to_device(void* d, const void* h, int64_t bytes) override {
    inner_->copy_host_to_device(d, h, bytes);
  }
  void copy_device_to_host(void* h, const void* d, int64_t bytes) override {
    inner_->copy_device_to_host(h, d, bytes);
  }
  void copy_device_to_device(void* to, const void* from, int64_t bytes) override {
    inner_->copy_device_to_device(to, from, bytes);
  }
  bool pin_host_memory(const void* h, int64_t bytes) override {
    return inner_->pin_host_memory(h, bytes);
  }
  void unpin_host_memory(const void* h) override { inner_->unpin_host_memory(h); }
  void memset_zero(void* d, int64_t bytes) override { inner_->memset_zero(d, bytes); }
  int64_t peak_allocated_bytes() const override { return inner_->peak_allocated_bytes(); }
  std::unique_ptr<kernels::SparseMemory> reserve_sparse(int64_t bytes) override {
    return inner_->reserve_sparse(bytes);
  }
  std::unique_ptr<kernels::Stream> create_stream() override { return inner_->create_stream(); }
  std::unique_ptr<kernels::Stream> borrow_stream(void* native) override {
    return inner_->borrow_stream(native);
  }
  std::unique_ptr<kernels::Event> create_event() override { return inner_->create_event(); }
  void set_stream(kernels::Stream* s) override { inner_->set_stream(s); }
  void record(kernels::Event& e) override { inner_->record(e); }
  void wait(kernels::Event& e) override { inner_->wait(e); }
  void synchronize(kernels::Event& e) override { inner_->synchronize(e); }
  void synchronize() override { inner_->synchronize(); }
  void convert(void* out, core::DType od, const void* in, core::DType id, int64_t n) override {
    inner_->convert(out, od, in, id, n);
  }
  void round_to(float* out, const float* in, int64_t n, core::DType dtype) override {
    inner_->round_to(out, in, n, dtype);
  }
  void set_matmul_precision(core::DType dtype) override { inner_->set_matmul_precision(dtype); }
  std::string matmul_kernel() const override { return inner_->matmul_kernel(); }
  void fill(float* x, int64_t n, float value) override { inner_->fill(x, n, value); }
  void mean(float* result, const float* x, int64_t n) override { inner_->mean(result, x, n); }
  void encoder_forward(float* out, const int32_t* tokens, const float* wte, VocabSlice vocab,
                       const float* wpe, int64_t B, int64_t T, int64_t C) override {
    inner_->encoder_forward(out, tokens, wte, vocab, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, VocabSlice vocab, float* dwpe, const float* dout,
                        const int32_t* tokens, int64_t B, int64_t T, int64_t C) override {
    inner_->encoder_backward(dwte, vocab, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int64_t N, int64_t C) override {
    inner_->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int64_t N,
                          int64_t C) override {
    inner_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int64_t N,
                      int64_t C, int64_t OC) override {
    inner_->matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, int64_t N, int64_t C, int64_t OC) override {
    inner_->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  }
  void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                      int64_t rows, int64_t ld) override {
    inner_->logits_forward(logits, inp, wte, N, C, rows, ld);
  }
  void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                       const float* wte, int64_t N, int64_t C, int64_t rows, int64_t ld) override {
    inner_->logits_backward(dinp, dwte, dlogits, inp, wte, N, C, rows, ld);
  }
  void attention_forward(float* out, float* scratch, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override {
    inner_->attention_forward(out, scratch, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override {
    inner_->attention_backward(dqkv, scratch, dout, qkv, B, T, C, NH);
  }

  void gelu_forward(float* out, const float* inp, int64_t n) override {
    inner_->gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    inner_->gelu_backward(dinp, inp, dout, n);
  }
  void residual_forward(float* out, const float* a, const float* b, int64_t n) override {
    inner_->residual_forward(out, a, b, n);
  }
  void residual_backward(float* da, float* db, const float* dout, int64_t n) override {
    inner_->residual_backward(da, db, dout, n);
  }
  void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                    const int32_t* targets, int64_t N, int64_t V,
                                    int64_t Vp) override {
    inner_->softmax_crossentropy_forward(probs, losses, logits, targets, N, V, Vp);
  }
  void vocab_parallel_max(float* row_max, const float* logits, int64_t N, int64_t V,
                          int64_t Vp) override {
    inner_->vocab_parallel_max(row_max, logits, N, V, Vp);
  }
  void vocab_parallel_sums(float* sums, const float* logits, const float* row_max,
                           const int32_t* targets, int64_t begin, int64_t N, int64_t V,
                           int64_t Vp) override {
    inner_->vocab_parallel_sums(sums, logits, row_max, targets, begin, N, V, Vp);
  }
  void vocab_parallel_softmax_loss(float* probs, float* losses, const float* logits,
                                   const float* row_max, const float* sums, int64_t N, int64_t V,
                                   int64_t Vp) override {
    inner_->vocab_parallel_softmax_loss(probs, losses, logits, row_max, sums, N, V, Vp);
  }
  void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                     const int32_t* targets, int64_t begin, int64_t N, int64_t V,
                                     int64_t Vp) override {
    inner_->crossentropy_softmax_backward(dlogits, dlosses, probs, targets, begin, N, V, Vp);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                    const AdamWParams& hyper, float* rounded) override {
    inner_->adamw_update(params, grads, m, v, n, hyper, rounded);
  }
  double sum_of_squares(const float* x, int64_t n) override { return inner_->sum_of_squares(x, n); }
  void scale(float* x, int64_t n, float factor) override { inner_->scale(x, n, factor); }
  void divide(float* x, int64_t n, float divisor) override { inner_->divide(x, n, divisor); }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace dslaunch::testing
