// The selftest's kernel checks: a device that computes one kernel slightly
// wrong fails that kernel's check and no other, and the emulated CUDA
// kernels pass them all.
#include "worker/selftest/kernel_checks.h"

#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/simt/emulated_backend.h"

namespace dslaunch::worker::selftest {
namespace {

using kernels::Backend;

// The CPU backend, except that gelu_backward's gradient is 0.1% too large.
class GeluOffByATenthPercent final : public Backend {
 public:
  std::string name() const override { return "broken gelu"; }
  bool memory_is_host() const override { return true; }
  void* allocate(int64_t bytes) override { return cpu_->allocate(bytes); }
  void deallocate(void* data) override { cpu_->deallocate(data); }
  void copy_host_to_device(void* d, const void* h, int64_t bytes) override {
    cpu_->copy_host_to_device(d, h, bytes);
  }
  void copy_device_to_host(void* h, const void* d, int64_t bytes) override {
    cpu_->copy_device_to_host(h, d, bytes);
  }
  void copy_device_to_device(void* to, const void* from, int64_t bytes) override {
    cpu_->copy_device_to_device(to, from, bytes);
  }
  void memset_zero(void* d, int64_t bytes) override { cpu_->memset_zero(d, bytes); }
  std::unique_ptr<kernels::Stream> create_stream() override { return cpu_->create_stream(); }
  std::unique_ptr<kernels::Event> create_event() override { return cpu_->create_event(); }
  void set_stream(kernels::Stream* s) override { cpu_->set_stream(s); }
  void record(kernels::Event& e) override { cpu_->record(e); }
  void wait(kernels::Event& e) override { cpu_->wait(e); }
  void synchronize(kernels::Event& e) override { cpu_->synchronize(e); }
  void synchronize() override { cpu_->synchronize(); }
  void convert(void* out, core::DType od, const void* in, core::DType id, int64_t n) override {
    cpu_->convert(out, od, in, id, n);
  }
  void round_to(float* out, const float* in, int64_t n, core::DType dtype) override {
    cpu_->round_to(out, in, n, dtype);
  }
  void set_matmul_precision(core::DType dtype) override { cpu_->set_matmul_precision(dtype); }
  std::string matmul_kernel() const override { return cpu_->matmul_kernel(); }
  void fill(float* x, int64_t n, float value) override { cpu_->fill(x, n, value); }
  void mean(float* result, const float* x, int64_t n) override { cpu_->mean(result, x, n); }
  void encoder_forward(float* out, const int32_t* tokens, const float* wte, VocabSlice vocab,
                       const float* wpe, int64_t B, int64_t T, int64_t C) override {
    cpu_->encoder_forward(out, tokens, wte, vocab, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, VocabSlice vocab, float* dwpe, const float* dout,
                        const int32_t* tokens, int64_t B, int64_t T, int64_t C) override {
    cpu_->encoder_backward(dwte, vocab, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                         const float* b, int64_t N, int64_t C) override {
    cpu_->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                          const float* w, const float* mean, const float* rstd, int64_t N,
                          int64_t C) override {
    cpu_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int64_t N,
                      int64_t C, int64_t OC) override {
    cpu_->matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, int64_t N, int64_t C, int64_t OC) override {
    cpu_->matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  }
  void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                      int64_t rows, int64_t ld) override {
    cpu_->logits_forward(logits, inp, wte, N, C, rows, ld);
  }
  void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                       const float* wte, int64_t N, int64_t C, int64_t rows,
                       int64_t ld) override {
    cpu_->logits_backward(dinp, dwte, dlogits, inp, wte, N, C, rows, ld);
  }
  void attention_forward(float* out, float* scratch, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override {
    cpu_->attention_forward(out, scratch, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override {
    cpu_->attention_backward(dqkv, scratch, dout, qkv, B, T, C, NH);
  }

  void gelu_forward(float* out, const float* inp, int64_t n) override {
    cpu_->gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    std::vector<float> scaled(dout, dout + n);
    for (float& value : scaled) value *= 1.001f;
    cpu_->gelu_backward(dinp, inp, scaled.data(), n);
  }
  void residual_forward(float* out, const float* a, const float* b, int64_t n) override {
    cpu_->residual_forward(out, a, b, n);
  }
  void residual_backward(float* da, float* db, const float* dout, int64_t n) override {
    cpu_->residual_backward(da, db, dout, n);
  }
  void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                    const int32_t* targets, int64_t N, int64_t V,
                                    int64_t Vp) override {
    cpu_->softmax_crossentropy_forward(probs, losses, logits, targets, N, V, Vp);
  }
  void vocab_parallel_max(float* row_max, const float* logits, int64_t N, int64_t V,
                          int64_t Vp) override {
    cpu_->vocab_parallel_max(row_max, logits, N, V, Vp);
  }
  void vocab_parallel_sums(float* sums, const float* logits, const float* row_max,
                           const int32_t* targets, int64_t begin, int64_t N, int64_t V,
                           int64_t Vp) override {
    cpu_->vocab_parallel_sums(sums, logits, row_max, targets, begin, N, V, Vp);
  }
  void vocab_parallel_softmax_loss(float* probs, float* losses, const float* logits,
                                   const float* row_max, const float* sums, int64_t N, int64_t V,
                                   int64_t Vp) override {
    cpu_->vocab_parallel_softmax_loss(probs, losses, logits, row_max, sums, N, V, Vp);
  }
  void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                     const int32_t* targets, int64_t begin, int64_t N, int64_t V,
                                     int64_t Vp) override {
    cpu_->crossentropy_softmax_backward(dlogits, dlosses, probs, targets, begin, N, V, Vp);
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                    const AdamWParams& hyper, float* rounded) override {
    cpu_->adamw_update(params, grads, m, v, n, hyper, rounded);
  }
  double sum_of_squares(const float* x, int64_t n) override { return cpu_->sum_of_squares(x, n); }
  void scale(float* x, int64_t n, float factor) override { cpu_->scale(x, n, factor); }

 private:
  std::unique_ptr<Backend> cpu_ = kernels::make_cpu_backend(1);
};

TEST_CASE("a kernel slightly off fails its own check and no other") {
  GeluOffByATenthPercent device;
  auto reference = kernels::make_cpu_backend(1);
  const std::vector<KernelCheck> checks = check_kernels(device, *reference, 3);
  REQUIRE(checks.size() > 15);
  for (const KernelCheck& check : checks) {
    INFO(check.kernel << " " << check.precision << ": error " << check.error);
    const bool gelu = check.kernel == "gelu_forward + backward";
    CHECK(check.passed() != gelu);
    // Far above the tolerance: the gradient (on top of what it held) is off by 1e-3.
    if (gelu) CHECK(check.error > 30 * check.tolerance);
  }
}

// On guarded memory: the checks reach the device's memory through the
// backend's copies only, as they must on a GPU.
TEST_CASE("every kernel of the backend interface is checked, in each precision it has") {
  auto emulated = kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  auto reference = kernels::make_cpu_backend(1);
  const std::vector<KernelCheck> checks = check_kernels(*emulated, *reference, 4);
  std::set<std::string> covered;
  for (const KernelCheck& check : checks) {
    INFO(check.kernel << " " << check.precision << ": error " << check.error);
    CHECK(check.passed());
    covered.insert(check.kernel + " | " + check.precision);
  }
  for (const char* precision : {"fp32", "bf16 products", "fp16 products"}) {
    CHECK(covered.count(std::string("matmul_forward + backward | ") + precision) == 1);
    CHECK(covered.count(std::string("logits_forward + backward | ") + precision) == 1);
  }
  for (const char* precision : {"fp32", "bf16 copy", "fp16 copy"}) {
    CHECK(covered.count(std::string("adamw_update | ") + precision) == 1);
  }
  CHECK(covered.count("round_to, convert | bf16") == 1);
  CHECK(covered.count("round_to, convert | fp16") == 1);
  for (const char* kernel :
       {"encoder_forward + backward", "layernorm_forward + backward",
        "attention_forward + backward", "gelu_forward + backward", "residual, scale, fill",
        "sum_of_squares, mean", "softmax_crossentropy_forward + backward",
        "vocab_parallel_max, _sums, _softmax_loss"}) {
    CHECK(covered.count(std::string(kernel) + " | fp32") == 1);
  }
}

}  // namespace
}  // namespace dslaunch::worker::selftest
