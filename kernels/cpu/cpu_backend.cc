// make_cpu_backend(): the CPU backend, the reference every other backend is
// tested against.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "kernels/allocation_tally.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_setup.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/rounded_gemm.h"
#include "kernels/host_sparse_memory.h"

namespace dslaunch::kernels {
namespace {

// Kernels run on the calling thread (and its OpenMP team) before they
// return, so a stream's order is program order and every event is complete
// when recorded: streams and events need no state here.
class CpuStream final : public Stream {};
class CpuEvent final : public Event {};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(std::max(threads, 1)) { prepare_calling_thread(); }

  std::string name() const override { return "cpu"; }
  bool memory_is_host() const override { return true; }
  core::AttentionScratch attention_scratch() const override {
    return core::AttentionScratch::kHeadProbabilities;
  }

  void* allocate(int64_t bytes) override {
    // aligned_alloc wants a multiple of the alignment.
    const size_t rounded = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    void* data = std::aligned_alloc(64, rounded);
    if (data == nullptr) throw std::bad_alloc();
    tally_.add(data, bytes);
    return data;
  }
  void deallocate(void* data) override {
    tally_.remove(data);
    std::free(data);
  }
  int64_t peak_allocated_bytes() const override { return tally_.peak(); }
  std::unique_ptr<SparseMemory> reserve_sparse(int64_t bytes) override {
    return make_host_sparse_memory(bytes, tally_);
  }
  void copy_host_to_device(void* device, const void* host, int64_t bytes) override {
    if (bytes > 0) std::memcpy(device, host, static_cast<size_t>(bytes));
  }
  void copy_device_to_host(void* host, const void* device, int64_t bytes) override {
    if (bytes > 0) std::memcpy(host, device, static_cast<size_t>(bytes));
  }
  void copy_device_to_device(void* to, const void* from, int64_t bytes) override {
    if (bytes > 0) std::memmove(to, from, static_cast<size_t>(bytes));
  }
  void memset_zero(void* device, int64_t bytes) override {
    if (bytes > 0) std::memset(device, 0, static_cast<size_t>(bytes));
  }

  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Stream> borrow_stream(void*) override { return nullptr; }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  void set_stream(Stream*) override {}
  void record(Event&) override {}
  void wait(Event&) override {}
  void synchronize(Event&) override {}
  void synchronize() override {}

  void convert(void* out, core::DType out_dtype, const void* in, core::DType in_dtype,
               int64_t n) override {
    prepare_calling_thread();
    cpu::convert(out, out_dtype, in, in_dtype, n);
  }
  void round_to(float* out, const float* in, int64_t n, core::DType dtype) override {
    prepare_calling_thread();
    cpu::round_to(out, in, n, dtype);
  }
  void set_matmul_precision(core::DType dtype) override {
    if (dtype == core::DType::kF32) {
      rounded_.reset();
    } else if (!rounded_ || rounded_->dtype() != dtype) {
      rounded_ = std::make_unique<cpu::RoundedGemm>(dtype);
      rounded_->set_weights(weights_, weights_size_);
    }
  }
  void set_weights(const float* weights, int64_t n) override {
    weights_ = n > 0 ? weights : nullptr;
    weights_size_ = n > 0 ? n : 0;
    if (rounded_) rounded_->set_weights(weights_, weights_size_);
  }
  void weights_changed() override {
    if (rounded_) rounded_->weights_changed();
  }
  int64_t weight_copy_bytes() const override {
    return rounded_ ? rounded_->weight_copy_bytes() : 0;
  }
  std::string matmul_kernel() const override {
    return rounded_ ? rounded_->kernel_name() : "OpenBLAS sgemm";
  }
  void fill(float* x, int64_t n, float value) override {
    prepare_calling_thread();
    cpu::fill(x, n, value);
  }
  void mean(float* result, const float* x, int64_t n) override { cpu::mean(result, x, n); }

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, VocabSlice vocab,
                       const float* wpe, int64_t B, int64_t T, int64_t C) override {
    prepare_calling_thread();
    cpu::encoder_forward(out, tokens, wte, vocab, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, VocabSlice vocab, float* dwpe, const float* dout,
                        const int32_t* tokens, int64_t B, int64_t T, int64_t C) override {
    prepare_calling_thread();
    cpu::encoder_backward(dwte, vocab, dwpe, dout, tokens, B, T, C);
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t N, int64_t C) override {
    prepare_calling_thread();
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t N, int64_t C) override {
    prepare_calling_thread();
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                            layernorm_partials_);
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t N, int64_t C, int64_t OC) override {
    prepare_calling_thread();
    cpu::matmul_forward(out, inp, weight, bias, N, C, OC, rounded_.get());
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t N, int64_t C,
                       int64_t OC) override {
    prepare_calling_thread();
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, rounded_.get());
  }

  void logits_forward(float* logits, const float* inp, const float* wte, int64_t N, int64_t C,
                      int64_t rows, int64_t ld) override {
    prepare_calling_thread();
    cpu::logits_forward(logits, inp, wte, N, C, rows, ld, rounded_.get());
  }
  void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                       const float* wte, int64_t N, int64_t C, int64_t rows, int64_t ld) override {
    prepare_calling_thread();
    cpu::logits_backward(dinp, dwte, dlogits, inp, wte, N, C, rows, ld, rounded_.get());
  }

  void attention_forward(float* out, float* scratch, const float* qkv, int64_t B, int64_t T,
                         int64_t C, int64_t NH) override {
    prepare_calling_thread();
    cpu::attention_forward(out, scratch, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override {
    prepare_calling_thread();
    cpu::attention_backward(dqkv, scratch, dout, qkv, B, T, C, NH);
  }

  void gelu_forward(float* out, const float* inp, int64_t n) override {
    prepare_calling_thread();
    cpu::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    prepare_calling_thread();
    cpu::gelu_backward(dinp, inp, dout, n);
  }

  void residual_forward(float* out, const float* a, const float* b, int64_t n) override {
    prepare_calling_thread();
    cpu::residual_forward(out, a, b, n);
  }
  void residual_backward(float* da, float* db, const float* dout, int64_t n) override {
    prepare_calling_thread();
    cpu::residual_backward(da, db, dout, n);
  }

  void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                    const int32_t* targets, int64_t N, int64_t V,
                                    int64_t Vp) override {
    prepare_calling_thread();
    cpu::softmax_crossentropy_forward(probs, losses, logits, targets, N, V, Vp);
  }
  void vocab_parallel_max(float* row_max, const float* logits, int64_t N, int64_t V,
                          int64_t Vp) override {
    prepare_calling_thread();
    cpu::vocab_parallel_max(row_max, logits, N, V, Vp);
  }
  void vocab_parallel_sums(float* sums, const float* logits, const float* row_max,
                           const int32_t* targets, int64_t vocab_begin, int64_t N, int64_t V,
                           int64_t Vp) override {
    prepare_calling_thread();
    cpu::vocab_parallel_sums(sums, logits, row_max, targets, vocab_begin, N, V, Vp);
  }
  void vocab_parallel_softmax_loss(float* probs, float* losses, const float* logits,
                                   const float* row_max, const float* sums, int64_t N, int64_t V,
                                   int64_t Vp) override {
    prepare_calling_thread();
    cpu::vocab_parallel_softmax_loss(probs, losses, logits, row_max, sums, N, V, Vp);
  }
  void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                     const int32_t* targets, int64_t vocab_begin, int64_t N,
                                     int64_t V, int64_t Vp) override {
    prepare_calling_thread();
    cpu::crossentropy_softmax_backward(dlogits, dlosses, probs, targets, vocab_begin, N, V, Vp);
  }

  void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                    const AdamWParams& hyper, float* rounded) override {
    prepare_calling_thread();
    // Writing the products' copy of the weights in the same pass saves
    // converting them again before the next forward.
    uint16_t* copy = rounded != nullptr && rounded_
                         ? rounded_->weight_copy_for(rounded, n, hyper.rounded_dtype)
                         : nullptr;
    cpu::adamw_update(params, grads, m, v, n, rounded, copy, hyper);
    if (copy != nullptr) rounded_->copied(rounded, n);
  }

  double sum_of_squares(const float* x, int64_t n) override {
    prepare_calling_thread();
    return cpu::sum_of_squares(x, n);
  }
  void scale(float* x, int64_t n, float factor) override {
    prepare_calling_thread();
    cpu::scale(x, n, factor);
  }
  void divide(float* x, int64_t n, float divisor) override {
    prepare_calling_thread();
    cpu::divide(x, n, divisor);
  }

 private:
  // OpenMP's thread count and MXCSR are per-thread state, an OpenMP pool
  // belongs to the thread that starts it, and OpenBLAS's thread count is
  // global; so the thread counts and FTZ/DAZ are set again whenever the
  // backend is called from another thread than last time or something (say,
  // another backend) changed a count in between. Cheap to check on every call.
  void prepare_calling_thread() {
    if (std::this_thread::get_id() == prepared_thread_ && omp_get_max_threads() == threads_ &&
        openblas_get_num_threads() == threads_) {
      return;
    }
    set_compute_threads(threads_);
    prepared_thread_ = std::this_thread::get_id();
  }

  const int threads_;
  std::thread::id prepared_thread_;
  AllocationTally tally_;
  std::vector<double> layernorm_partials_;
  std::unique_ptr<cpu::RoundedGemm> rounded_;  // null: fp32 products
  const float* weights_ = nullptr;             // set_weights()
  int64_t weights_size_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace dslaunch::kernels
