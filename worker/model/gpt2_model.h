#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "core/layout/vocab_chunks.h"
#include "core/status.h"
#include "worker/comm/communicator.h"

namespace dslaunch::core {
struct LocalSizes;
}

namespace dslaunch::worker::model {

// Where a model's parameters come from when not every rank holds them all
// (ZeRO stage 3): the model calls these hooks around its use of each group
// of tensors, and reads them from the buffer passed to forward()/backward()
// only in between. Called on the model's thread.
class ParameterSource {
 public:
  enum class Pass { kForward, kBackward };
  // The token embedding's three uses (core/layout/vocab_chunks.h).
  using VocabUse = core::VocabUse;
  virtual ~ParameterSource() = default;
  // At the start of forward(): the position embedding and ln_f, needed
  // until the end of backward().
  virtual void acquire_embeddings() = 0;
  // At the end of backward().
  virtual void release_embeddings() = 0;
  // Around the use of the token embedding's rows of vocabulary chunk `chunk`.
  virtual void acquire_vocab_chunk(int chunk, VocabUse use) = 0;
  virtual void release_vocab_chunk(int chunk, VocabUse use) = 0;
  // Around block `layer`'s use in a forward or backward pass.
  virtual void acquire_block(int layer, Pass pass) = 0;
  virtual void release_block(int layer, Pass pass) = 0;
};

// Where ZeRO stage 3 takes the tied output layer's part of the token
// embedding's gradient as soon as backward() has it, a vocabulary chunk at
// a time, so that the whole gradient of the embedding is never in memory
// (the encoder adds its part only at the end of backward()).
class OutputGradientSink {
 public:
  virtual ~OutputGradientSink() = default;
  // Floats [begin, end) of the gradient buffer (a chunk's rows of wte) hold
  // the output layer's part of their gradient. The sink may take it away
  // and leave them zero; backward() does not touch them again before
  // wait_output_parts() returns, and reports them through GradientsReady
  // at its end, with the encoder's part, as usual.
  virtual void output_part_ready(int64_t begin, int64_t end) = 0;
  virtual void wait_output_parts() = 0;
};

// Where backward's gradient buffer holds memory only around its use (ZeRO
// stages 2-3 on a GPU, whose memory is not paged in on first touch as the
// host's is): backward() calls prepare() before it first writes or adds to
// floats [begin, end) of the buffer in a pass, after which they hold
// memory, and zeros where they held none. Called on the model's thread.
class GradientSpace {
 public:
  virtual ~GradientSpace() = default;
  virtual void prepare(int64_t begin, int64_t end) = 0;
};

// GPT-2's forward and backward passes over flat buffers laid out by a
// ParameterTable: token and position embeddings, pre-LayerNorm blocks
// (causal self-attention with a fused QKV projection, a 4x MLP with GELU),
// a final LayerNorm and the output projection tied to the token embedding.
// On a pipeline stage the model runs one chunk of the table (`chunk`: the
// stage's blocks, or one virtual stage's under the interleaved schedule;
// the chunks of a stage share the parameter and gradient buffers): the
// first chunk of the first stage starts from the embeddings, the others
// from an input the caller puts in stage_input(); the last chunk of the
// last stage ends with the loss, the others leave their output in
// stage_output(). Backward mirrors it through residual_gradient().
//
// Owns the activations of `activation_slots` micro-batches of up to
// max_batch x seq_len tokens (a pipeline keeps several in flight); the
// parameter and gradient buffers belong to the caller. Not thread-safe; the
// backend is used from the calling thread.
// Activation checkpointing (Megatron's full recompute, block by block): the
// first `blocks` blocks of the stage keep only their output in the forward
// pass and run their forward again in the backward pass. With
// `partition_activations` and tensor parallelism, an output that only feeds
// the next block is kept as this rank's 1/T slice and gathered from the
// tensor group when the next block needs it (DeepSpeed's partitioned
// activations). The results are the same bits as without.
struct ActivationRecompute {
  int blocks = 0;
  bool partition_activations = false;
};


// What a model needs only while one of its passes runs: the recomputed
// blocks' activations and the passes' temporaries (the residual stream's
// gradient and attention's scratch among them). A pipeline stage's model chunks run one
// pass at a time, so they share one (Gpt2Model's `scratch` argument).
struct Gpt2Scratch {
  kernels::DeviceBuffer<float> recompute;
  kernels::DeviceBuffer<float> gradients;
};

class Gpt2Model {
 public:

  // Called during backward() with [begin, end) float ranges of the gradient
  // buffer whose values are final for this micro-batch, in the order they
  // complete (ln_f, the blocks from last to first, then the embeddings).
  // Every float of the chunk's tensors is reported exactly once per
  // backward(): of the whole buffer when the table has one chunk.
  using GradientsReady = std::function<void(int64_t begin, int64_t end)>;

  // A table cut for tensor parallelism (Megatron's: heads, MLP columns and
  // vocabulary rows split) needs `tensor_comm`, the group of ranks holding
  // the other slices, as that table's tensor rank; forward() and backward()
  // then all-reduce over it where Megatron does, and every rank of the group
  // must call them together with the same inputs.
  Gpt2Model(const core::ParameterTable& table, kernels::Backend& backend, int64_t max_batch,
            int64_t seq_len, comm::Communicator* tensor_comm = nullptr,
            int activation_slots = 1, ActivationRecompute recompute = {}, int chunk = 0,
            std::shared_ptr<Gpt2Scratch> scratch = nullptr);

  // This model's scratch, for the table's other chunks to share (they have
  // the same widths, hence the same scratch sizes).
  const std::shared_ptr<Gpt2Scratch>& scratch() const { return scratch_; }

  // Runs the model on inputs (B,T) and returns the mean cross-entropy over
  // the B*T targets (B,T) (0 on a stage that is not the last). B <=
  // max_batch, T == seq_len <= max_seq_len; token ids must be below the real
  // vocabulary size. Keeps the activations in `slot` for backward(). With a
  // ParameterSource, reads each tensor of params only between its acquire
  // and release calls, and leaves the embeddings acquired (backward()
  // releases them).
  float forward(const float* params, const int32_t* inputs, const int32_t* targets, int64_t B,
                int slot = 0);

  // The gradient of `loss_scale` times the mean loss of the forward() that
  // filled `slot`, ACCUMULATED into grads (same layout as params). Pass
  // 1/accumulation_steps as loss_scale to average over micro-batches.
  // on_ready may be empty. A stage that is not the last starts from its
  // output's gradient in residual_gradient().
  void backward(const float* params, float* grads, float loss_scale,
                const GradientsReady& on_ready, int slot = 0);

  // Pipeline stages' links, each (B,T,C) in the backend's memory: where a
  // stage that is not the first takes its input (before forward() of that
  // slot), where a stage that is not the last leaves its output (after it),
  // and the residual stream's gradient: the output's on the way into
  // backward() of a stage that is not the last, the input's on the way out
  // of a stage that is not the first.
  float* stage_input(int slot);
  const float* stage_output(int slot);
  float* residual_gradient();

  // Forward and backward floating-point operations per token at this
  // sequence length (matrix products only, as llm.c and Megatron count them:
  // 6 per parameter of the matrices plus attention's 12*L*C*T).
  double flops_per_token() const;

  // Hooks to call around parameter use from now on; nullptr (the default)
  // for none, when the buffer holds every parameter. Not owned; must outlive
  // its use here.
  void set_parameter_source(ParameterSource* source) { source_ = source; }
  // The same for an OutputGradientSink; only a model with both the
  // embeddings and the head (no pipeline) calls it.
  void set_output_gradient_sink(OutputGradientSink* sink) { sink_ = sink; }
  // The same for a GradientSpace.
  void set_gradient_space(GradientSpace* space) { space_ = space; }
  ParameterSource* parameter_source() const { return source_; }
  OutputGradientSink* output_gradient_sink() const { return sink_; }

  int64_t seq_len() const { return seq_len_; }
  // Its slots' activations and token ids, and the scratch when this model
  // made it (a shared scratch counts once, with the chunk that made it).
  int64_t activation_bytes() const;

  // The first failure of a tensor-group all-reduce since construction; after
  // one, the model skips the group's collectives and its results are not
  // valid. Check it after forward() and backward().
  const core::Status& tensor_status() const { return tensor_status_; }
  // Seconds spent in tensor-group all-reduces since construction (the
  // communication tensor parallelism adds to a step, none of it overlapped).
  double tensor_comm_seconds() const { return tensor_comm_seconds_; }

 private:
  const core::ParameterTable& table_;
  kernels::Backend& backend_;
  int64_t max_batch_;
  int64_t seq_len_;
  int slots_;
  ActivationRecompute recompute_;
  int chunk_;
  std::vector<int64_t> batch_;  // per slot: B of its last forward(), 0 before one
  int64_t slot_floats_ = 0;     // activations per slot
  ParameterSource* source_ = nullptr;
  OutputGradientSink* sink_ = nullptr;
  GradientSpace* space_ = nullptr;
  comm::Communicator* tensor_comm_;  // null without tensor parallelism
  core::Status tensor_status_;
  double tensor_comm_seconds_ = 0;
  // Where the tensor group's collectives read and write on a backend whose
  // memory is not the host's: the communicator works on host memory (MPI;
  // NCCL, which reads device memory, is not built yet).
  std::vector<float> tensor_staging_;
  // In the backend's memory: the model touches them only through kernels.
  kernels::DeviceBuffer<float> activations_;
  std::shared_ptr<Gpt2Scratch> scratch_;
  bool owns_scratch_ = false;
  kernels::DeviceBuffer<int32_t> inputs_;
  kernels::DeviceBuffer<int32_t> targets_;
  kernels::DeviceBuffer<float> mean_loss_;

  struct BlockView;

  core::LocalSizes local_sizes() const;
  void tensor_all_reduce(float* x, int64_t n, comm::ReduceOp op);
  // whole[0, n) = the tensor group's slices of n / T elements, in rank order.
  void tensor_all_gather(const float* slice, float* whole, int64_t n);
  float* slot_activations(int slot);
  BlockView block_view(int layer, float* slot);
  // Block `layer`'s whole input (gathered when the previous block kept a slice).
  const float* block_input(int layer, float* slot, int64_t B);
  void block_forward(const float* params, int layer, const BlockView& view, const float* residual,
                     float* scratch, int64_t B);
  // The token and position embeddings' sum into out (N,C); `scratch` (N,C)
  // takes a vocabulary chunk's part when a ParameterSource gives wte a
  // chunk at a time.
  void encoder_forward(const float* params, float* out, float* scratch, const int32_t* tokens,
                       int64_t B);
  // fn(first row, rows) for each vocabulary chunk in order, between the
  // source's acquire and release of it.
  template <typename Fn>
  void for_vocab_chunks(ParameterSource::VocabUse use, const Fn& fn);
};

// The GPT-2 initialisation, deterministic in `seed`: weights and embeddings
// normal(0, 0.02), the two residual projections (attn.c_proj, mlp.c_proj)
// normal(0, 0.02/sqrt(2*num_layers)), biases 0, LayerNorm weights 1. Each
// tensor draws from its own stream (seed, its global index) and a rank keeps
// its slice of the tensor's global values, so every layout of the model
// starts from the same weights.
void init_gpt2_parameters(const core::ParameterTable& table, uint64_t seed, float* params);
// Floats [begin, end) of the layout that initialisation gives, into
// out[0, end - begin), without producing the others.
void init_gpt2_parameter_range(const core::ParameterTable& table, uint64_t seed, int64_t begin,
                               int64_t end, float* out);

// The same for a caller that reads many ranges (a rank's partition, a piece
// at a time): a tensor's random stream goes on from where the last range
// left it when the next range lies further on, instead of skipping its
// draws from the tensor's start again.
class Gpt2Initializer {
 public:
  Gpt2Initializer(const core::ParameterTable& table, uint64_t seed);
  ~Gpt2Initializer();
  void fill(int64_t begin, int64_t end, float* out);

 private:
  struct Stream;
  const core::ParameterTable& table_;
  uint64_t seed_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace dslaunch::worker::model
