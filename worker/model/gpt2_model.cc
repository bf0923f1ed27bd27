#include "worker/model/gpt2_model.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/layout/activation_layout.h"
#include "core/layout/vocab_chunks.h"

namespace dslaunch::worker::model {
namespace {

using core::ActivationLayout;
using core::BlockOffsets;
using core::GradientLayout;
using core::LocalSizes;
using core::RecomputeLayout;

// Pointers to one block's parameters (or gradients) in a flat buffer.
template <typename Float>
struct BlockTensors {
  Float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;

  BlockTensors(const core::ParameterTable& table, int layer, Float* base) {
    using core::TensorRole;
    auto at = [&](TensorRole role) { return base + table.offset(role, layer); };
    ln1w = at(TensorRole::kLn1Weight);
    ln1b = at(TensorRole::kLn1Bias);
    qkvw = at(TensorRole::kQkvWeight);
    qkvb = at(TensorRole::kQkvBias);
    projw = at(TensorRole::kAttnProjWeight);
    projb = at(TensorRole::kAttnProjBias);
    ln2w = at(TensorRole::kLn2Weight);
    ln2b = at(TensorRole::kLn2Bias);
    fcw = at(TensorRole::kFcWeight);
    fcb = at(TensorRole::kFcBias);
    fcprojw = at(TensorRole::kFcProjWeight);
    fcprojb = at(TensorRole::kFcProjBias);
  }
};

void zero(kernels::Backend& backend, float* x, int64_t n) {
  backend.memset_zero(x, n * static_cast<int64_t>(sizeof(float)));
}

}  // namespace

// A block's activations as pointers, wherever they live: in the slot, or
// (recomputed blocks) in the shared recompute buffer. `output` is where the
// block writes its whole output.
struct Gpt2Model::BlockView {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *residual2, *ln2, *ln2_mean, *ln2_rstd, *fch,
      *fch_gelu, *output;
};

Gpt2Model::Gpt2Model(const core::ParameterTable& table, kernels::Backend& backend,
                     int64_t max_batch, int64_t seq_len, comm::Communicator* tensor_comm,
                     int activation_slots, ActivationRecompute recompute, int chunk,
                     std::shared_ptr<Gpt2Scratch> scratch)
    : table_(table),
      backend_(backend),
      max_batch_(max_batch),
      seq_len_(seq_len),
      slots_(activation_slots),
      recompute_(recompute),
      chunk_(chunk),
      batch_(static_cast<size_t>(std::max(activation_slots, 1)), 0),
      tensor_comm_(table.shard().tensor_size > 1 ? tensor_comm : nullptr) {
  const core::ModelShard& shard = table.shard();
  if (shard.tensor_size > 1 &&
      (tensor_comm == nullptr || tensor_comm->size() != shard.tensor_size ||
       tensor_comm->rank() != shard.tensor_rank)) {
    throw std::invalid_argument(
        fmt::format("tensor rank {} of {} needs the communicator of its tensor group, as that rank",
                    shard.tensor_rank, shard.tensor_size));
  }
  if (seq_len < 1 || seq_len > table.config().max_seq_len) {
    throw std::invalid_argument(
        fmt::format("sequence length {} is outside [1, {}]", seq_len, table.config().max_seq_len));
  }
  if (chunk < 0 || chunk >= table.chunk_count()) {
    throw std::invalid_argument(
        fmt::format("model chunk {} of a table of {}", chunk, table.chunk_count()));
  }
  if (activation_slots < 1 || recompute.blocks < 0) {
    throw std::invalid_argument(fmt::format("{} activation slots, {} recomputed blocks",
                                            activation_slots, recompute.blocks));
  }
  const LocalSizes sizes = local_sizes();
  slot_floats_ = ActivationLayout(sizes, max_batch, seq_len).total;
  activations_ = kernels::DeviceBuffer<float>(backend, slot_floats_ * slots_);
  const int64_t recompute_floats = RecomputeLayout(sizes, max_batch, seq_len).total;
  const int64_t gradient_floats =
      GradientLayout(sizes, max_batch, seq_len, backend.attention_scratch()).total;
  if (scratch != nullptr && (scratch->recompute.size() != recompute_floats ||
                             scratch->gradients.size() != gradient_floats)) {
    throw std::invalid_argument("a shared scratch of another size");
  }
  if (scratch == nullptr) {
    scratch = std::make_shared<Gpt2Scratch>();
    scratch->recompute = kernels::DeviceBuffer<float>(backend, recompute_floats);
    scratch->gradients = kernels::DeviceBuffer<float>(backend, gradient_floats);
    owns_scratch_ = true;
  }
  scratch_ = std::move(scratch);
  inputs_ = kernels::DeviceBuffer<int32_t>(backend, max_batch * seq_len * slots_);
  targets_ = kernels::DeviceBuffer<int32_t>(backend, max_batch * seq_len * slots_);
  mean_loss_ = kernels::DeviceBuffer<float>(backend, 1);
}

LocalSizes Gpt2Model::local_sizes() const {
  return LocalSizes(table_, chunk_, recompute_.blocks, recompute_.partition_activations);
}

int64_t Gpt2Model::activation_bytes() const {
  const int64_t scratch =
      owns_scratch_ ? scratch_->recompute.bytes() + scratch_->gradients.bytes() : 0;
  return activations_.bytes() + scratch + inputs_.bytes() + targets_.bytes();
}

double Gpt2Model::flops_per_token() const {
  const core::Gpt2Config& c = table_.config();
  const double matrix_params = static_cast<double>(c.num_layers) * 12 * c.channels * c.channels +
                               static_cast<double>(c.padded_vocab_size) * c.channels;
  return 6 * matrix_params + 12.0 * c.num_layers * c.channels * seq_len_;
}

float* Gpt2Model::slot_activations(int slot) {
  if (slot < 0 || slot >= slots_) {
    throw std::out_of_range(fmt::format("activation slot {} of {}", slot, slots_));
  }
  return activations_.data() + slot_floats_ * slot;
}

float* Gpt2Model::stage_input(int slot) {
  return slot_activations(slot) + ActivationLayout(local_sizes(), max_batch_, seq_len_).input;
}

const float* Gpt2Model::stage_output(int slot) {
  return slot_activations(slot) + ActivationLayout(local_sizes(), max_batch_, seq_len_).output();
}

float* Gpt2Model::residual_gradient() {
  return scratch_->gradients.data() +
         GradientLayout(local_sizes(), max_batch_, seq_len_, backend_.attention_scratch())
             .dresidual;
}

void Gpt2Model::tensor_all_reduce(float* x, int64_t n, comm::ReduceOp op) {
  if (tensor_comm_ == nullptr || !tensor_status_.ok()) return;
  const auto start = std::chrono::steady_clock::now();
  // The communicator reads and writes x from the host's side of the stream,
  // or a host copy of it (the copy waits for the stream).
  const bool staged = !backend_.memory_is_host();
  if (!staged) backend_.synchronize();
  const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
  float* buffer = x;
  if (staged) {
    tensor_staging_.resize(n);
    buffer = tensor_staging_.data();
    backend_.copy_device_to_host(buffer, x, bytes);
  }
  tensor_status_ = tensor_comm_->all_reduce(comm::buffer_of(buffer, n), op)
                       ->wait()
                       .with_context("tensor-parallel all-reduce");
  if (staged && tensor_status_.ok()) backend_.copy_host_to_device(x, buffer, bytes);
  tensor_comm_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Gpt2Model::tensor_all_gather(const float* slice, float* whole, int64_t n) {
  if (tensor_comm_ == nullptr || !tensor_status_.ok()) return;
  const auto start = std::chrono::steady_clock::now();
  const int parts = tensor_comm_->size();
  const int64_t part = n / parts;
  // Staged as tensor_all_reduce's: [0, n) the whole, [n, n + part) the slice.
  const bool staged = !backend_.memory_is_host();
  if (!staged) backend_.synchronize();
  const float* from = slice;
  float* into = whole;
  if (staged) {
    tensor_staging_.resize(n + part);
    into = tensor_staging_.data();
    backend_.copy_device_to_host(into + n, slice, part * static_cast<int64_t>(sizeof(float)));
    from = into + n;
  }
  tensor_status_ = tensor_comm_
                       ->all_gather(comm::buffer_of(from, part), comm::buffer_of(into, n),
                                    comm::Blocks::consecutive(std::vector<int64_t>(parts, part)))
                       ->wait()
                       .with_context("gathering a partitioned activation");
  if (staged && tensor_status_.ok()) {
    backend_.copy_host_to_device(whole, into, n * static_cast<int64_t>(sizeof(float)));
  }
  tensor_comm_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Gpt2Model::BlockView Gpt2Model::block_view(int layer, float* slot) {
  const LocalSizes z = local_sizes();
  const ActivationLayout a(z, max_batch_, seq_len_);
  const int index = layer - z.layer_begin;
  float* base = slot;
  BlockOffsets b = a.blocks[index];
  float* output = slot + a.outputs[index];
  if (z.recomputes(layer)) {
    const RecomputeLayout r(z, max_batch_, seq_len_);
    base = scratch_->recompute.data();
    b = r.block;
    // A partitioned output is computed whole in the shared buffer; the two
    // buffers alternate so that a block reads the previous one's output
    // while it writes its own.
    if (z.partitions_output(layer)) output = base + r.outputs[index % 2];
  }
  return {base + b.ln1,      base + b.ln1_mean,  base + b.ln1_rstd, base + b.qkv,
          base + b.atty,     base + b.residual2, base + b.ln2,      base + b.ln2_mean,
          base + b.ln2_rstd, base + b.fch,       base + b.fch_gelu, output};
}

const float* Gpt2Model::block_input(int layer, float* slot, int64_t B) {
  const LocalSizes z = local_sizes();
  const ActivationLayout a(z, max_batch_, seq_len_);
  if (layer == z.layer_begin) return slot + a.input;
  const int previous = layer - 1 - z.layer_begin;
  if (!z.partitions_output(layer - 1)) return slot + a.outputs[previous];
  // The previous block kept this rank's slice of its output: the tensor
  // group's slices make it whole again.
  float* whole = scratch_->recompute.data() + RecomputeLayout(z, max_batch_, seq_len_).gathered;
  tensor_all_gather(slot + a.outputs[previous], whole, B * seq_len_ * z.C);
  return whole;
}

void Gpt2Model::block_forward(const float* params, int layer, const BlockView& v,
                              const float* residual, float* scratch, int64_t B) {
  const LocalSizes z = local_sizes();
  const int64_t T = seq_len_, C = z.C, N = B * T;
  // The replicated biases of the row-parallel projections enter once: on
  // tensor rank 0, before the group's sum.
  const bool adds_replicated = table_.shard().tensor_rank == 0;
  const BlockTensors<const float> w(table_, layer, params);
  backend_.layernorm_forward(v.ln1, v.ln1_mean, v.ln1_rstd, residual, w.ln1w, w.ln1b, N, C);
  backend_.matmul_forward(v.qkv, v.ln1, w.qkvw, w.qkvb, N, C, 3 * z.Ca);
  float* attention_scratch =
      scratch_->gradients.data() +
      GradientLayout(z, max_batch_, seq_len_, backend_.attention_scratch()).attention;
  backend_.attention_forward(v.atty, attention_scratch, v.qkv, B, T, z.Ca, z.NHa);
  backend_.matmul_forward(scratch, v.atty, w.projw, adds_replicated ? w.projb : nullptr, N, z.Ca,
                          C);
  tensor_all_reduce(scratch, N * C, comm::ReduceOp::kSum);
  backend_.residual_forward(v.residual2, residual, scratch, N * C);
  backend_.layernorm_forward(v.ln2, v.ln2_mean, v.ln2_rstd, v.residual2, w.ln2w, w.ln2b, N, C);
  backend_.matmul_forward(v.fch, v.ln2, w.fcw, w.fcb, N, C, z.F);
  backend_.gelu_forward(v.fch_gelu, v.fch, N * z.F);
  backend_.matmul_forward(scratch, v.fch_gelu, w.fcprojw, adds_replicated ? w.fcprojb : nullptr, N,
                          z.F, C);
  tensor_all_reduce(scratch, N * C, comm::ReduceOp::kSum);
  backend_.residual_forward(v.output, v.residual2, scratch, N * C);
}

template <typename Fn>
void Gpt2Model::for_vocab_chunks(ParameterSource::VocabUse use, const Fn& fn) {
  const core::VocabChunks chunks(local_sizes().Vl, table_.config().channels);
  for (int k = 0; k < chunks.count(); ++k) {
    if (source_ != nullptr) source_->acquire_vocab_chunk(k, use);
    fn(chunks.begin(k), chunks.end(k) - chunks.begin(k));
    if (source_ != nullptr) source_->release_vocab_chunk(k, use);
  }
}

void Gpt2Model::encoder_forward(const float* params, float* out, float* scratch,
                                const int32_t* tokens, int64_t B) {
  const LocalSizes z = local_sizes();
  const int64_t T = seq_len_, C = z.C;
  const float* wte = params + table_.tensor(core::TensorRole::kWte).offset;
  // The position embedding, replicated, is added once (tensor rank 0).
  const float* wpe = table_.shard().tensor_rank == 0
                         ? params + table_.tensor(core::TensorRole::kWpe).offset
                         : nullptr;
  if (source_ == nullptr) {
    backend_.encoder_forward(out, tokens, wte, {z.vocab_begin, z.Vl}, wpe, B, T, C);
    return;
  }
  // Each chunk adds the rows of its tokens, 0 for the others: a position
  // gets one non-zero term besides its position's, so the sum has the bits
  // of the whole table's lookup.
  for_vocab_chunks(ParameterSource::VocabUse::kEncoder, [&](int64_t row, int64_t rows) {
    const bool first = row == 0;
    backend_.encoder_forward(first ? out : scratch, tokens, wte + row * C,
                             {z.vocab_begin + row, rows}, first ? wpe : nullptr, B, T, C);
    if (!first) backend_.residual_forward(out, out, scratch, B * T * C);
  });
}

float Gpt2Model::forward(const float* params, const int32_t* inputs, const int32_t* targets,
                         int64_t B, int slot) {
  if (B < 1 || B > max_batch_) {
    throw std::invalid_argument(fmt::format("batch {} is outside [1, {}]", B, max_batch_));
  }
  const core::Gpt2Config& c = table_.config();
  const LocalSizes z = local_sizes();
  const int64_t T = seq_len_, C = c.channels, N = B * T;
  const int64_t V = c.vocab_size;
  for (int64_t i = 0; i < N; ++i) {
    if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V) {
      throw std::invalid_argument(
          fmt::format("token {} at position {} is outside the vocabulary [0, {})",
                      (inputs[i] < 0 || inputs[i] >= V) ? inputs[i] : targets[i], i, V));
    }
  }
  float* act = slot_activations(slot);
  batch_[slot] = B;
  int32_t* slot_inputs = inputs_.data() + slot * max_batch_ * T;
  int32_t* slot_targets = targets_.data() + slot * max_batch_ * T;
  backend_.copy_host_to_device(slot_inputs, inputs, N * static_cast<int64_t>(sizeof(int32_t)));
  backend_.copy_host_to_device(slot_targets, targets, N * static_cast<int64_t>(sizeof(int32_t)));

  const ActivationLayout a(z, max_batch_, T);
  if (z.first) {
    if (source_ != nullptr) source_->acquire_embeddings();
    encoder_forward(params, act + a.input, act + a.scratch, slot_inputs, B);
    tensor_all_reduce(act + a.input, N * C, comm::ReduceOp::kSum);
  }
  const float* residual = act + a.input;
  const int64_t slice = N * C / z.parts;
  const int64_t rank_offset = table_.shard().tensor_rank * slice;
  for (int l = z.layer_begin; l < z.layer_end; ++l) {
    if (source_ != nullptr) source_->acquire_block(l, ParameterSource::Pass::kForward);
    const BlockView v = block_view(l, act);
    block_forward(params, l, v, residual, act + a.scratch, B);
    if (z.partitions_output(l)) {
      backend_.copy_device_to_device(act + a.outputs[l - z.layer_begin], v.output + rank_offset,
                                     slice * static_cast<int64_t>(sizeof(float)));
    }
    residual = v.output;
    if (source_ != nullptr) source_->release_block(l, ParameterSource::Pass::kForward);
  }
  if (!z.last) {
    // The next stage reads the output from the host's side (the communicator).
    backend_.synchronize();
    return 0;
  }
  const float* wte = params + table_.tensor(core::TensorRole::kWte).offset;
  const float* lnfw = params + table_.tensor(core::TensorRole::kLnfWeight).offset;
  const float* lnfb = params + table_.tensor(core::TensorRole::kLnfBias).offset;
  backend_.layernorm_forward(act + a.lnf, act + a.lnf_mean, act + a.lnf_rstd, residual, lnfw, lnfb,
                             N, C);
  // The tied output layer, a vocabulary chunk's columns of the logits at a
  // time.
  for_vocab_chunks(ParameterSource::VocabUse::kOutputForward, [&](int64_t row, int64_t rows) {
    backend_.logits_forward(act + a.logits + row, act + a.lnf, wte + row * C, N, C, rows, z.Vl);
  });
  if (z.parts == 1) {
    backend_.softmax_crossentropy_forward(act + a.probs, act + a.losses, act + a.logits,
                                          slot_targets, N, V, z.Vl);
  } else {
    // No rank holds a whole row of logits: the row's maximum, its sum of
    // exponentials and the target's logit are reduced over the group.
    backend_.vocab_parallel_max(act + a.row_max, act + a.logits, N, z.V, z.Vl);
    tensor_all_reduce(act + a.row_max, N, comm::ReduceOp::kMax);
    backend_.vocab_parallel_sums(act + a.sums, act + a.logits, act + a.row_max, slot_targets,
                                 z.vocab_begin, N, z.V, z.Vl);
    tensor_all_reduce(act + a.sums, 2 * N, comm::ReduceOp::kSum);
    backend_.vocab_parallel_softmax_loss(act + a.probs, act + a.losses, act + a.logits,
                                         act + a.row_max, act + a.sums, N, z.V, z.Vl);
  }
  backend_.mean(mean_loss_.data(), act + a.losses, N);
  float loss = 0;
  backend_.copy_device_to_host(&loss, mean_loss_.data(), sizeof(float));
  return loss;
}

void Gpt2Model::backward(const float* params, float* grads, float loss_scale,
                         const GradientsReady& on_ready, int slot) {
  float* act = slot_activations(slot);
  if (batch_[slot] == 0) throw std::logic_error("Gpt2Model::backward() without a forward()");
  const core::Gpt2Config& c = table_.config();
  const LocalSizes z = local_sizes();
  const int64_t B = batch_[slot], T = seq_len_, C = c.channels, N = B * T;
  const ActivationLayout a(z, max_batch_, T);
  const GradientLayout g(z, max_batch_, T, backend_.attention_scratch());
  float* d = scratch_->gradients.data();
  const int32_t* slot_inputs = inputs_.data() + slot * max_batch_ * T;
  const int32_t* slot_targets = targets_.data() + slot * max_batch_ * T;
  auto report = [&](int64_t begin, int64_t end) {
    if (on_ready) on_ready(begin, end);
  };
  auto prepare = [&](int64_t begin, int64_t end) {
    if (space_ != nullptr) space_->prepare(begin, end);
  };

  // dresidual carries the gradient of the residual stream: from the head on
  // the last stage, received from the next stage on the others.
  float* dresidual = d + g.dresidual;
  if (z.last) {
    // dlosses: every position weighs loss_scale / N in the mean. The logits
    // are not needed any more, so their buffer takes their gradient.
    float* dlosses = act + a.losses;
    backend_.fill(dlosses, N, loss_scale / static_cast<float>(N));
    float* dlogits = act + a.logits;
    zero(backend_, dlogits, N * z.Vl);
    backend_.crossentropy_softmax_backward(dlogits, dlosses, act + a.probs, slot_targets,
                                           z.vocab_begin, N, z.V, z.Vl);
    const core::TensorInfo& wte_info = table_.tensor(core::TensorRole::kWte);
    const core::TensorInfo& lnfw_info = table_.tensor(core::TensorRole::kLnfWeight);
    const core::TensorInfo& lnfb_info = table_.tensor(core::TensorRole::kLnfBias);
    // Where a column- or vocabulary-parallel layer's input gradient is
    // summed over the tensor group (Megatron's "f" operator, backward); the
    // row-parallel layers' input gradients need nothing.
    zero(backend_, d + g.dln, N * C);
    // A sink takes each chunk's rows of the embedding's gradient as they
    // complete (the model has the embeddings, hence wte's encoder part).
    OutputGradientSink* sink = z.first ? sink_ : nullptr;
    for_vocab_chunks(ParameterSource::VocabUse::kOutputBackward, [&](int64_t row, int64_t rows) {
      float* dwte_rows = grads + wte_info.offset + row * C;
      prepare(wte_info.offset + row * C, wte_info.offset + (row + rows) * C);
      backend_.logits_backward(d + g.dln, dwte_rows, dlogits + row, act + a.lnf,
                               params + wte_info.offset + row * C, N, C, rows, z.Vl);
      if (sink != nullptr) {
        // The sink reads the gradient from the host's side.
        backend_.synchronize();
        sink->output_part_ready(wte_info.offset + row * C, wte_info.offset + (row + rows) * C);
      }
    });
    tensor_all_reduce(d + g.dln, N * C, comm::ReduceOp::kSum);
    zero(backend_, dresidual, N * C);
    prepare(lnfw_info.offset, lnfb_info.offset + lnfb_info.numel);
    backend_.layernorm_backward(dresidual, grads + lnfw_info.offset, grads + lnfb_info.offset,
                                d + g.dln, act + a.output(), params + lnfw_info.offset,
                                act + a.lnf_mean, act + a.lnf_rstd, N, C);
    report(lnfw_info.offset, lnfb_info.offset + lnfb_info.numel);
    // The last stage's own copy of the tied embedding has its gradient now.
    if (!z.first) report(wte_info.offset, wte_info.offset + wte_info.numel);
  }

  // Each residual add passes dresidual on unchanged, and the LayerNorm
  // backward adds its branch to it. It is the same on every rank of the
  // tensor group, so the replicated tensors (LayerNorms, row-parallel
  // biases) get the same gradients there.
  for (int l = z.layer_end - 1; l >= z.layer_begin; --l) {
    if (source_ != nullptr) source_->acquire_block(l, ParameterSource::Pass::kBackward);
    const auto [begin, end] = table_.layer_range(l);
    prepare(begin, end);
    const BlockTensors<const float> w(table_, l, params);
    const BlockTensors<float> dw(table_, l, grads);
    const BlockView v = block_view(l, act);
    const float* residual = block_input(l, act, B);
    // A checkpointed block runs its forward again from its saved input.
    if (z.recomputes(l)) block_forward(params, l, v, residual, act + a.scratch, B);

    zero(backend_, d + g.dfch_gelu, N * z.F);
    backend_.matmul_backward(d + g.dfch_gelu, dw.fcprojw, dw.fcprojb, dresidual, v.fch_gelu,
                             w.fcprojw, N, z.F, C);
    zero(backend_, d + g.dfch, N * z.F);
    backend_.gelu_backward(d + g.dfch, v.fch, d + g.dfch_gelu, N * z.F);
    zero(backend_, d + g.dln, N * C);
    backend_.matmul_backward(d + g.dln, dw.fcw, dw.fcb, d + g.dfch, v.ln2, w.fcw, N, C, z.F);
    tensor_all_reduce(d + g.dln, N * C, comm::ReduceOp::kSum);
    backend_.layernorm_backward(dresidual, dw.ln2w, dw.ln2b, d + g.dln, v.residual2, w.ln2w,
                                v.ln2_mean, v.ln2_rstd, N, C);
    zero(backend_, d + g.datty, N * z.Ca);
    backend_.matmul_backward(d + g.datty, dw.projw, dw.projb, dresidual, v.atty, w.projw, N, z.Ca,
                             C);
    zero(backend_, d + g.dqkv, N * 3 * z.Ca);
    backend_.attention_backward(d + g.dqkv, d + g.attention, d + g.datty, v.qkv, B, T, z.Ca, z.NHa);
    zero(backend_, d + g.dln, N * C);
    backend_.matmul_backward(d + g.dln, dw.qkvw, dw.qkvb, d + g.dqkv, v.ln1, w.qkvw, N, C,
                             3 * z.Ca);
    tensor_all_reduce(d + g.dln, N * C, comm::ReduceOp::kSum);
    backend_.layernorm_backward(dresidual, dw.ln1w, dw.ln1b, d + g.dln, residual, w.ln1w,
                                v.ln1_mean, v.ln1_rstd, N, C);
    if (source_ != nullptr) source_->release_block(l, ParameterSource::Pass::kBackward);
    report(begin, end);
  }
  if (!z.first) {
    // The previous stage reads the input's gradient from the host's side.
    backend_.synchronize();
    return;
  }
  const core::TensorInfo& wte_info = table_.tensor(core::TensorRole::kWte);
  const core::TensorInfo& wpe_info = table_.tensor(core::TensorRole::kWpe);
  if (sink_ != nullptr && z.last) sink_->wait_output_parts();
  prepare(wte_info.offset, wpe_info.offset + wpe_info.numel);
  backend_.encoder_backward(grads + wte_info.offset, {z.vocab_begin, z.Vl}, grads + wpe_info.offset,
                            dresidual, slot_inputs, B, T, C);
  if (source_ != nullptr) source_->release_embeddings();
  report(wte_info.offset, wpe_info.offset + wpe_info.numel);
}

}  // namespace dslaunch::worker::model
