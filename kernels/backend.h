#pragma once

// The compute kernels the engine runs, behind one interface: the CPU backend
// (OpenBLAS and vectorised loops) is the reference the CUDA backend is tested
// against.
//
// Conventions, for every kernel:
// - Tensors are dense, row-major float arrays in the backend's memory; shapes
//   are given in comments as (B, T, C): batch, time, channels. NH is the head
//   count, V the real vocabulary and Vp the padded one (V <= Vp).
// - Linear weights are in Hugging Face's Conv1D layout, (in, out), so that
//   out = inp · weight + bias.
// - Backward kernels ACCUMULATE into the gradients they write (+=), as
//   llm.c's do: gradient accumulation over micro-batches and residual
//   branches then need no extra buffers. Callers zero gradients when a new
//   step begins.
// - Every pointer a kernel takes is the backend's memory (allocate()):
//   device memory on a GPU, host memory on the CPU. The engine moves data
//   in and out with the copy calls only, so the same model and trainer run
//   on either; it never reads or writes tensors between kernels.
// - Kernels and copies run in order on the backend's current stream
//   (set_stream(); the default stream at first), as CUDA's do: a call may
//   return before its work is done, and the results are there for the next
//   call on the same stream, for a stream that waits on an event recorded
//   after it, and for the host after synchronize(). copy_device_to_host()
//   returns when the bytes are in host memory.
// - A backend is used from one thread at a time; it may use several threads
//   inside a call.
// - CPU backend: every kernel gives the same bits whatever the thread count,
//   except matmul_* and logits_*, whose products are OpenBLAS's threaded
//   sgemm; OpenBLAS does not promise it there (0.3.21 does give the same bits
//   on 1 and 2 threads). Results differ between vector units (AVX-512, AVX2,
//   SSE), as each rounds its sums in its own order.

#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/layout/attention_scratch.h"
#include "kernels/sparse_memory.h"

namespace dslaunch::kernels {

// An ordered queue of work on a device (a CUDA stream).
class Stream {
 public:
  virtual ~Stream() = default;
};

// A point in a stream's work, which another stream or the host can wait
// for (a CUDA event).
class Event {
 public:
  virtual ~Event() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // Whether the backend's memory is the host's own, which host code may
  // read and write between kernels (the CPU backend's). Where it is not (a
  // GPU's), the trainer keeps the model states there, or with offload in
  // host memory, mirroring the parameters and gradients the model needs
  // (worker/engine/device_mirror.h).
  virtual bool memory_is_host() const = 0;

  // Memory: `bytes` of the backend's memory, aligned to 64 bytes, not
  // initialised; throws std::bad_alloc when there is not enough.
  // deallocate() takes what allocate() returned (or nullptr).
  virtual void* allocate(int64_t bytes) = 0;
  virtual void deallocate(void* data) = 0;
  virtual void copy_host_to_device(void* device, const void* host, int64_t bytes) = 0;
  virtual void copy_device_to_host(void* host, const void* device, int64_t bytes) = 0;
  // copy_host_to_device() has read the host bytes when it returns: the
  // caller may change or reuse them at once (CUDA copies from pageable
  // memory so; a backend that copies asynchronously from page-locked memory
  // must wait first). The two ranges must not overlap (cudaMemcpy's rule).
  virtual void copy_device_to_device(void* to, const void* from, int64_t bytes) = 0;
  // Page-locks host[0, bytes) until unpin_host_memory(host), so that the
  // copies to and from it run at the bus's full rate instead of through the
  // driver's own staging buffers (cudaHostRegister; DeepSpeed's
  // pin_memory). False where the backend has no use for it (its memory is
  // the host's) or the system refused (too little lockable memory): the
  // copies are then pageable, as correct and slower. The range must not
  // overlap a pinned one and must stay allocated, and not be returned to
  // the system (madvise), until it is unpinned. The copy calls keep their
  // contracts for pinned host memory. unpin_host_memory() never throws: it
  // runs in destructors (pinned_host_memory.h).
  virtual bool pin_host_memory(const void* /*host*/, int64_t /*bytes*/) { return false; }
  virtual void unpin_host_memory(const void* /*host*/) {}
  virtual void memset_zero(void* device, int64_t bytes) = 0;
  // The most bytes the backend's allocations held at once since it was
  // made, as allocate() was asked for them (kernels/allocation_tally.h).
  virtual int64_t peak_allocated_bytes() const = 0;
  // `bytes` of the backend's addresses of which only committed ranges hold
  // memory (sparse_memory.h), counted in peak_allocated_bytes() while they
  // do; throws std::bad_alloc when they cannot be reserved. The backend
  // must outlive it.
  virtual std::unique_ptr<SparseMemory> reserve_sparse(int64_t bytes) = 0;

  // Streams and events. The stream set is the one kernels and copies run on
  // until the next set_stream(); it must outlive its use. record() marks the
  // current stream's work so far; wait() makes the current stream's later
  // work wait for an event; synchronize() blocks the host until the event's
  // work is done.
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // The stream `native` names, made by another library that queues its own
  // work there (a cudaStream_t of NCCL's communicator), not owned: work
  // queued on it runs in order with that library's. nullptr where the
  // backend has no such streams (the CPU's). The emulator's native handles
  // are its own Stream objects.
  virtual std::unique_ptr<Stream> borrow_stream(void* native) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual void set_stream(Stream* stream) = 0;  // nullptr: the default stream
  virtual void record(Event& event) = 0;
  virtual void wait(Event& event) = 0;
  virtual void synchronize(Event& event) = 0;
  // Blocks the host until all work on every stream is done.
  virtual void synchronize() = 0;

  // Element types: parameters, activations and gradients are fp32 today;
  // 16-bit training keeps bf16 or fp16 copies (issue 15). out[i] = in[i]
  // converted between fp32, bf16 and fp16, rounding to nearest even as
  // PyTorch does (half_precision.h); n elements, not overlapping. Throws
  // std::invalid_argument for another dtype.
  virtual void convert(void* out, core::DType out_dtype, const void* in, core::DType in_dtype,
                       int64_t n) = 0;
  // out[i] = in[i] rounded to `dtype` (bf16 or fp16, nearest even) and
  // widened back to fp32: the value a 16-bit copy holds (past fp16's range,
  // ±inf); kF32 copies. out may be in.
  virtual void round_to(float* out, const float* in, int64_t n, core::DType dtype) = 0;

  // The precision of the matrix products (matmul_*, logits_*): kF32 (the
  // default), or kBF16/kF16, where each product's two operands are rounded
  // to that format and multiplied with fp32 accumulation, as tensor cores
  // do in 16-bit training. Other kernels stay fp32.
  virtual void set_matmul_precision(core::DType dtype) = 0;
  // What runs the products at that precision, for reports
  // (e.g. "oneDNN bf16 (AVX512_BF16)", "OpenBLAS sgemm").
  virtual std::string matmul_kernel() const = 0;
  // The model's weights, for 16-bit products: floats [weights, weights + n).
  // A backend may keep a 16-bit copy of them (weight_copy_bytes()), so that
  // each weight matrix is converted once per change rather than once per
  // product. Whoever changes the weights calls weights_changed() first;
  // adamw_update() writing its `rounded` output among them may update the
  // copy in the same pass. n = 0 forgets them. By default nothing is kept.
  virtual void set_weights(const float* /*weights*/, int64_t /*n*/) {}
  virtual void weights_changed() {}
  virtual int64_t weight_copy_bytes() const { return 0; }

  // x[i] = value for i in [0, n).
  virtual void fill(float* x, int64_t n, float value) = 0;
  // result[0] = the mean of x[0, n), summed in double (on the CPU in index
  // order, on a GPU in a fixed tree order) and rounded to float once; result
  // stays in the backend's memory.
  virtual void mean(float* result, const float* x, int64_t n) = 0;

  // The token embedding's rows one rank holds: all of them, or under tensor
  // parallelism its slice of the vocabulary, rows [begin, begin + rows)
  // (Megatron's vocabulary-parallel embedding and output layer).
  struct VocabSlice {
    int64_t begin = 0;
    int64_t rows = 0;
  };

  // out (B,T,C) = wte[tokens] + wpe[t], where wte (vocab.rows,C) holds rows
  // vocab of the token embedding: a token outside them contributes 0 (the
  // tensor group sums the ranks' outputs). wpe may be null: no position term.
  // tokens (B,T) must be >= 0.
  virtual void encoder_forward(float* out, const int32_t* tokens, const float* wte,
                               VocabSlice vocab, const float* wpe, int64_t B, int64_t T,
                               int64_t C) = 0;
  // dwte (vocab.rows,C) += the scatter of dout (B,T,C) over the tokens inside
  // vocab; dwpe (maxT,C) += its sum over the batch. A token's positions are
  // summed first, in (b, t) order, and the sum added to its row once: a
  // caller that takes a row's earlier contents away and adds them back
  // afterwards (ZeRO stage 3's tied output layer) gets the same bits.
  virtual void encoder_backward(float* dwte, VocabSlice vocab, float* dwpe, const float* dout,
                                const int32_t* tokens, int64_t B, int64_t T, int64_t C) = 0;

  // out (N,C) = (inp - mean) * rstd * weight + bias, per row; saves mean and
  // rstd (N) for the backward pass. eps is 1e-5, as in GPT-2.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int64_t N, int64_t C) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int64_t N, int64_t C) = 0;

  // out (N,OC) = inp (N,C) · weight (C,OC) + bias (OC); bias may be null.
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                              int64_t N, int64_t C, int64_t OC) = 0;
  // dinp (N,C) += dout · weightᵀ; dweight (C,OC) += inpᵀ · dout; dbias (OC)
  // += the column sums of dout. dbias may be null; dinp may be null when the
  // input needs no gradient.
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int64_t N, int64_t C,
                               int64_t OC) = 0;

  // The output projection tied to the token embedding: logits (N,rows) =
  // inp (N,C) · wteᵀ, wte (rows,C), with ld >= rows floats from one row of
  // logits to the next (ld > rows: a vocabulary chunk's columns of wider
  // logits, core::VocabChunks).
  virtual void logits_forward(float* logits, const float* inp, const float* wte, int64_t N,
                              int64_t C, int64_t rows, int64_t ld) = 0;
  // dinp (N,C) += dlogits · wte; dwte (rows,C) += dlogitsᵀ · inp; dlogits
  // laid out as logits_forward's.
  virtual void logits_backward(float* dinp, float* dwte, const float* dlogits, const float* inp,
                               const float* wte, int64_t N, int64_t C, int64_t rows,
                               int64_t ld) = 0;

  // Causal multi-head self-attention over a fused projection qkv (B,T,3C)
  // laid out [q | k | v], each split into NH heads of C/NH channels. Writes
  // out (B,T,C). Scores are scaled by 1/sqrt(C/NH). `scratch` holds
  // core::attention_scratch_floats(attention_scratch(), B, T) floats,
  // overwritten by each pass: on the CPU a head's probabilities (B,T,T)
  // and their gradient, heads one at a time; on a GPU the same for a block
  // of query rows (core::kAttentionRowBlock) of every sequence. No T×T
  // matrix is kept from forward to backward: the backward pass recomputes
  // the probabilities, so the memory per block is what B·T·C-sized
  // tensors take.
  virtual core::AttentionScratch attention_scratch() const = 0;
  virtual void attention_forward(float* out, float* scratch, const float* qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH) = 0;
  // dqkv (B,T,3C) += the gradient through attention, `scratch` as above.
  virtual void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  int64_t B, int64_t T, int64_t C, int64_t NH) = 0;

  // out = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))), elementwise; out
  // may be inp.
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;

  // out = a + b, elementwise; out may be a or b.
  virtual void residual_forward(float* out, const float* a, const float* b, int64_t n) = 0;
  // da += dout; db += dout.
  virtual void residual_backward(float* da, float* db, const float* dout, int64_t n) = 0;

  // The softmax and the cross-entropy loss of each row, in one call that
  // reads each row of logits (N,Vp) while it is in cache: probs (N,Vp) gets the softmax of the
  // row's first V logits (the padded columns [V, Vp) get 0), and losses (N) = logsumexp(row's first
  // V logits) - logits[i, targets[i]], the loss PyTorch's log_softmax gives. The loss is computed
  // from the logits, not from probs, so it stays finite however small the target's probability is
  // (a probability below float's range becomes 0 in probs). targets must lie in [0, V). probs may
  // be logits (in place); losses must not overlap either.
  virtual void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                            const int32_t* targets, int64_t N, int64_t V,
                                            int64_t Vp) = 0;
  // The same softmax and loss when the vocabulary is split across a tensor
  // group (Megatron's vocabulary-parallel cross-entropy): each rank holds
  // logits (N,Vp) for its slice, whose first V columns are real vocabulary
  // (V may be 0) and whose first column is token vocab_begin. In three steps
  // around two all-reduces over the group, so that no rank holds the whole
  // row:
  // 1. row_max (N) = each row's maximum over its V columns (-inf for V = 0);
  //    the group takes the maximum.
  virtual void vocab_parallel_max(float* row_max, const float* logits, int64_t N, int64_t V,
                                  int64_t Vp) = 0;
  // 2. sums (2N): sums[i] = Σ exp(logit - row_max[i]) over the V columns,
  //    summed in double; sums[N + i] = row i's logit of targets[i] where the
  //    slice holds it, else 0. The group sums both.
  virtual void vocab_parallel_sums(float* sums, const float* logits, const float* row_max,
                                   const int32_t* targets, int64_t vocab_begin, int64_t N,
                                   int64_t V, int64_t Vp) = 0;
  // 3. probs (N,Vp) = exp(logit - row_max) / sums[i] over the V columns, 0 in
  //    the rest; losses (N) = (row_max - target logit) + log(sum), as
  //    softmax_crossentropy_forward computes it. probs may be logits.
  virtual void vocab_parallel_softmax_loss(float* probs, float* losses, const float* logits,
                                           const float* row_max, const float* sums, int64_t N,
                                           int64_t V, int64_t Vp) = 0;

  // The fused gradient of softmax and cross-entropy: dlogits (N,Vp) +=
  // (probs - onehot(target)) · dlosses[i] over the first V columns; padded
  // columns stay unchanged. Column j is token vocab_begin + j (0 unless the
  // vocabulary is split); a target outside the V columns has no one-hot term
  // here.
  virtual void crossentropy_softmax_backward(float* dlogits, const float* dlosses,
                                             const float* probs, const int32_t* targets,
                                             int64_t vocab_begin, int64_t N, int64_t V,
                                             int64_t Vp) = 0;

  // One step of torch.optim.AdamW (decoupled = true) or torch.optim.Adam
  // with an L2 penalty (decoupled = false) on n parameters, as PyTorch 1.13
  // takes it with foreach=False: m and v are the first and second moments,
  // step counts from 1. The hyperparameters are doubles, as Python's floats
  // are: the step's scalars (bias corrections, step size, 1 - beta, the
  // decay 1 - lr·weight_decay) are computed in double and rounded to float
  // once; the float loop then rounds each operation where PyTorch's CPU
  // kernels do (fused multiply-adds included). That gives PyTorch's results
  // bit for bit (checked against its AVX2 kernels), and the same bits on
  // every vector unit.
  struct AdamWParams {
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0;
    bool decoupled = true;
    int64_t step = 1;
    // The format of `rounded` below (bf16 or fp16).
    core::DType rounded_dtype = core::DType::kBF16;
  };
  // rounded, when not null: rounded[i] = the updated params[i] rounded to
  // hyper.rounded_dtype, written in the same pass (16-bit training's model
  // weights beside its fp32 masters).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                            const AdamWParams& hyper, float* rounded) = 0;

  // Σ x², accumulated in double so the result does not depend on how the
  // caller splits a buffer. Returns to the host (it synchronizes): the
  // global norm is summed over ranks on the host with the loss.
  virtual double sum_of_squares(const float* x, int64_t n) = 0;
  // x *= factor.
  virtual void scale(float* x, int64_t n, float factor) = 0;
  // x /= divisor: a division, not a product with 1/divisor, so that a mean
  // over ranks is the correctly rounded quotient of the sum whatever the
  // count (the gradients' mean over a data group, in host or device memory).
  virtual void divide(float* x, int64_t n, float divisor) = 0;
};

// The CPU backend's sum_of_squares adds the double sums of consecutive
// blocks of this many floats in order, so summing a buffer one block a call
// and adding the results in order gives the same bits as one call (the norm
// of swapped gradients, read a piece at a time, does).
inline constexpr int64_t kSumOfSquaresBlock = 16384;

// The CPU backend with `threads` compute threads (OpenMP, shared with
// OpenBLAS); every one of them flushes denormals to zero (FTZ and DAZ),
// which keeps tiny gradients from slowing arithmetic tenfold.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace dslaunch::kernels
