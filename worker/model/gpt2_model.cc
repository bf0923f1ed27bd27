#include "worker/model/gpt2_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace dslaunch::worker::model {
namespace {

// The widths one rank computes with: Megatron's tensor parallelism gives
// each of `parts` ranks NH/parts heads (Ca = C/parts attention channels),
// F = 4C/parts of the MLP's hidden units and Vl = Vp/parts vocabulary rows;
// the residual stream (C) stays whole on every rank. A pipeline stage runs
// blocks [layer_begin, layer_end), the first stage the embeddings and the
// last the head (ln_f, the output layer and the loss).
struct LocalSizes {
  int64_t parts, C, Ca, NHa, F, Vl;
  int64_t vocab_begin;  // the first vocabulary row this rank holds
  int64_t V;            // real vocabulary rows among them (may be 0)
  int layer_begin, layer_end;
  bool first, last;

  explicit LocalSizes(const core::ParameterTable& table) {
    const core::Gpt2Config& c = table.config();
    const core::ModelShard& shard = table.shard();
    parts = shard.tensor_size;
    C = c.channels;
    Ca = C / parts;
    NHa = c.num_heads / parts;
    F = 4 * C / parts;
    Vl = c.padded_vocab_size / parts;
    vocab_begin = shard.tensor_rank * Vl;
    V = std::clamp<int64_t>(c.vocab_size - vocab_begin, 0, Vl);
    layer_begin = table.layer_begin();
    layer_end = table.layer_end();
    first = table.has_embeddings();
    last = table.has_head();
  }
};

// Offsets of one micro-batch's activations (one slot), in floats. Per
// block: what the backward pass reads; the matrix products' outputs that
// feed a residual add go through `scratch` and are not kept.
struct ActivationLayout {
  int64_t input = 0;  // (B,T,C): the stage's input (the embeddings' output on the first stage)
  struct Block {
    int64_t ln1, ln1_mean, ln1_rstd;  // (B,T,C), (B,T), (B,T)
    int64_t qkv;                      // (B,T,3Ca): this rank's heads of q, k and v
    int64_t atty;                     // (B,T,Ca)
    int64_t att;                      // (B,NHa,T,T)
    int64_t residual2;                // (B,T,C)
    int64_t ln2, ln2_mean, ln2_rstd;  // (B,T,C), (B,T), (B,T)
    int64_t fch, fch_gelu;            // (B,T,F) each
    int64_t residual3;                // (B,T,C): the block's output
  };
  std::vector<Block> blocks;  // the stage's, from layer_begin
  // The head's, on the last stage only.
  int64_t lnf = 0, lnf_mean = 0, lnf_rstd = 0;  // (B,T,C), (B,T), (B,T)
  int64_t logits = 0;                           // (B,T,Vl), reused as dlogits
  int64_t probs = 0;                            // (B,T,Vl)
  int64_t losses = 0;                           // (B,T)
  int64_t row_max = 0, sums = 0;                // (B,T), (2,B,T): vocabulary-parallel softmax
  int64_t scratch = 0;                          // (B,T,C)
  int64_t total = 0;

  ActivationLayout(const LocalSizes& z, int64_t B, int64_t T) {
    const int64_t N = B * T;
    const int64_t C = z.C;
    auto take = [this](int64_t n) {
      const int64_t at = total;
      total += n;
      return at;
    };
    input = take(N * C);
    for (int l = z.layer_begin; l < z.layer_end; ++l) {
      Block b{};
      b.ln1 = take(N * C);
      b.ln1_mean = take(N);
      b.ln1_rstd = take(N);
      b.qkv = take(N * 3 * z.Ca);
      b.atty = take(N * z.Ca);
      b.att = take(B * z.NHa * T * T);
      b.residual2 = take(N * C);
      b.ln2 = take(N * C);
      b.ln2_mean = take(N);
      b.ln2_rstd = take(N);
      b.fch = take(N * z.F);
      b.fch_gelu = take(N * z.F);
      b.residual3 = take(N * C);
      blocks.push_back(b);
    }
    if (z.last) {
      lnf = take(N * C);
      lnf_mean = take(N);
      lnf_rstd = take(N);
      logits = take(N * z.Vl);
      probs = take(N * z.Vl);
      losses = take(N);
      if (z.parts > 1) {
        row_max = take(N);
        sums = take(2 * N);
      }
    }
    scratch = take(N * C);
  }

  // The stage's output: its last block's (the input when it has none).
  int64_t output() const { return blocks.empty() ? input : blocks.back().residual3; }
};

// The backward pass's temporaries, shared by every block and slot.
// `dresidual` carries the gradient of the residual stream: a stage that is
// not the last receives its output's gradient there, and a stage that is
// not the first leaves its input's gradient there.
struct GradientLayout {
  int64_t dresidual, dln, datty, dqkv, dfch, dfch_gelu, datt_scratch, total = 0;

  GradientLayout(const LocalSizes& z, int64_t B, int64_t T) {
    const int64_t N = B * T;
    const int64_t C = z.C;
    auto take = [this](int64_t n) {
      const int64_t at = total;
      total += n;
      return at;
    };
    dresidual = take(N * C);
    dln = take(N * C);
    datty = take(N * z.Ca);
    dqkv = take(N * 3 * z.Ca);
    dfch = take(N * z.F);
    dfch_gelu = take(N * z.F);
    datt_scratch = take(B * z.NHa * T * T);
  }
};

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

// splitmix64: decorrelates the per-tensor seeds derived from one job seed.
uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Normal samples by Box-Muller from raw 64-bit draws: std::normal_distribution
// is implementation-defined, and the initialisation must not change with the
// standard library.
void fill_normal(float* out, int64_t n, double stddev, uint64_t seed) {
  std::mt19937_64 engine(seed);
  auto uniform = [&engine] { return (static_cast<double>(engine() >> 11) + 0.5) * 0x1.0p-53; };
  for (int64_t i = 0; i < n; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * M_PI * uniform();
    out[i] = static_cast<float>(stddev * radius * std::cos(angle));
    if (i + 1 < n) out[i + 1] = static_cast<float>(stddev * radius * std::sin(angle));
  }
}

}  // namespace

Gpt2Model::Gpt2Model(const core::ParameterTable& table, kernels::Backend& backend, int64_t max_batch,
                     int64_t seq_len, comm::Communicator* tensor_comm, int activation_slots)
    : table_(table),
      backend_(backend),
      max_batch_(max_batch),
      seq_len_(seq_len),
      slots_(activation_slots),
      batch_(static_cast<size_t>(std::max(activation_slots, 1)), 0),
      tensor_comm_(table.shard().tensor_size > 1 ? tensor_comm : nullptr) {
  const core::ModelShard& shard = table.shard();
  if (shard.tensor_size > 1 &&
      (tensor_comm == nullptr || tensor_comm->size() != shard.tensor_size ||
       tensor_comm->rank() != shard.tensor_rank)) {
    throw std::invalid_argument(fmt::format(
        "tensor rank {} of {} needs the communicator of its tensor group, as that rank",
        shard.tensor_rank, shard.tensor_size));
  }
  if (seq_len < 1 || seq_len > table.config().max_seq_len) {
    throw std::invalid_argument(
        fmt::format("sequence length {} is outside [1, {}]", seq_len, table.config().max_seq_len));
  }
  if (activation_slots < 1) {
    throw std::invalid_argument(fmt::format("{} activation slots", activation_slots));
  }
  const LocalSizes sizes(table);
  slot_floats_ = ActivationLayout(sizes, max_batch, seq_len).total;
  activations_ = kernels::DeviceBuffer<float>(backend, slot_floats_ * slots_);
  activation_grads_ =
      kernels::DeviceBuffer<float>(backend, GradientLayout(sizes, max_batch, seq_len).total);
  inputs_ = kernels::DeviceBuffer<int32_t>(backend, max_batch * seq_len * slots_);
  targets_ = kernels::DeviceBuffer<int32_t>(backend, max_batch * seq_len * slots_);
  mean_loss_ = kernels::DeviceBuffer<float>(backend, 1);
}

int64_t Gpt2Model::activation_bytes() const {
  return activations_.bytes() + activation_grads_.bytes() + inputs_.bytes() + targets_.bytes();
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
  return slot_activations(slot) + ActivationLayout(LocalSizes(table_), max_batch_, seq_len_).input;
}

const float* Gpt2Model::stage_output(int slot) {
  return slot_activations(slot) +
         ActivationLayout(LocalSizes(table_), max_batch_, seq_len_).output();
}

float* Gpt2Model::residual_gradient() {
  return activation_grads_.data() + GradientLayout(LocalSizes(table_), max_batch_, seq_len_).dresidual;
}

void Gpt2Model::tensor_all_reduce(float* x, int64_t n, comm::ReduceOp op) {
  if (tensor_comm_ == nullptr || !tensor_status_.ok()) return;
  const auto start = std::chrono::steady_clock::now();
  // The communicator reads and writes x from the host's side of the stream.
  backend_.synchronize();
  tensor_status_ = tensor_comm_->all_reduce(comm::buffer_of(x, n), op)
                       ->wait()
                       .with_context("tensor-parallel all-reduce");
  tensor_comm_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

float Gpt2Model::forward(const float* params, const int32_t* inputs, const int32_t* targets,
                         int64_t B, int slot) {
  if (B < 1 || B > max_batch_) {
    throw std::invalid_argument(fmt::format("batch {} is outside [1, {}]", B, max_batch_));
  }
  const core::Gpt2Config& c = table_.config();
  const LocalSizes z(table_);
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
  // The replicated biases of the row-parallel projections (and the position
  // embedding) enter once: on tensor rank 0, before the group's sum.
  const bool adds_replicated = table_.shard().tensor_rank == 0;
  auto replicated = [adds_replicated](const float* tensor) {
    return adds_replicated ? tensor : nullptr;
  };

  const ActivationLayout a(z, B, T);
  if (z.first) {
    if (source_ != nullptr) source_->acquire_embeddings();
    const float* wte = params + table_.tensor(core::TensorRole::kWte).offset;
    const float* wpe = params + table_.tensor(core::TensorRole::kWpe).offset;
    backend_.encoder_forward(act + a.input, slot_inputs, wte, {z.vocab_begin, z.Vl},
                             replicated(wpe), B, T, C);
    tensor_all_reduce(act + a.input, N * C, comm::ReduceOp::kSum);
  }
  const float* residual = act + a.input;
  for (int l = z.layer_begin; l < z.layer_end; ++l) {
    if (source_ != nullptr) source_->acquire_block(l, ParameterSource::Pass::kForward);
    const BlockTensors<const float> w(table_, l, params);
    const ActivationLayout::Block& b = a.blocks[l - z.layer_begin];
    backend_.layernorm_forward(act + b.ln1, act + b.ln1_mean, act + b.ln1_rstd, residual, w.ln1w,
                               w.ln1b, N, C);
    backend_.matmul_forward(act + b.qkv, act + b.ln1, w.qkvw, w.qkvb, N, C, 3 * z.Ca);
    backend_.attention_forward(act + b.atty, act + b.att, act + b.qkv, B, T, z.Ca, z.NHa);
    backend_.matmul_forward(act + a.scratch, act + b.atty, w.projw, replicated(w.projb), N, z.Ca,
                            C);
    tensor_all_reduce(act + a.scratch, N * C, comm::ReduceOp::kSum);
    backend_.residual_forward(act + b.residual2, residual, act + a.scratch, N * C);
    backend_.layernorm_forward(act + b.ln2, act + b.ln2_mean, act + b.ln2_rstd, act + b.residual2,
                               w.ln2w, w.ln2b, N, C);
    backend_.matmul_forward(act + b.fch, act + b.ln2, w.fcw, w.fcb, N, C, z.F);
    backend_.gelu_forward(act + b.fch_gelu, act + b.fch, N * z.F);
    backend_.matmul_forward(act + a.scratch, act + b.fch_gelu, w.fcprojw, replicated(w.fcprojb), N,
                            z.F, C);
    tensor_all_reduce(act + a.scratch, N * C, comm::ReduceOp::kSum);
    backend_.residual_forward(act + b.residual3, act + b.residual2, act + a.scratch, N * C);
    residual = act + b.residual3;
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
  backend_.logits_forward(act + a.logits, act + a.lnf, wte, N, C, z.Vl);
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
  const LocalSizes z(table_);
  const int64_t B = batch_[slot], T = seq_len_, C = c.channels, N = B * T;
  const ActivationLayout a(z, B, T);
  const GradientLayout g(z, B, T);
  float* d = activation_grads_.data();
  const int32_t* slot_inputs = inputs_.data() + slot * max_batch_ * T;
  const int32_t* slot_targets = targets_.data() + slot * max_batch_ * T;
  auto report = [&](int64_t begin, int64_t end) {
    if (on_ready) on_ready(begin, end);
  };
  auto report_tensor = [&](core::TensorRole role) {
    const core::TensorInfo& t = table_.tensor(role);
    report(t.offset, t.offset + t.numel);
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
    backend_.logits_backward(d + g.dln, grads + wte_info.offset, dlogits, act + a.lnf,
                             params + wte_info.offset, N, C, z.Vl);
    tensor_all_reduce(d + g.dln, N * C, comm::ReduceOp::kSum);
    zero(backend_, dresidual, N * C);
    backend_.layernorm_backward(dresidual, grads + lnfw_info.offset, grads + lnfb_info.offset,
                                d + g.dln, act + a.output(), params + lnfw_info.offset,
                                act + a.lnf_mean, act + a.lnf_rstd, N, C);
    report(lnfw_info.offset, lnfb_info.offset + lnfb_info.numel);
    // The last stage's own copy of the tied embedding has its gradient now.
    if (!z.first) report_tensor(core::TensorRole::kWte);
  }

  // Each residual add passes dresidual on unchanged, and the LayerNorm
  // backward adds its branch to it. It is the same on every rank of the
  // tensor group, so the replicated tensors (LayerNorms, row-parallel
  // biases) get the same gradients there.
  for (int l = z.layer_end - 1; l >= z.layer_begin; --l) {
    if (source_ != nullptr) source_->acquire_block(l, ParameterSource::Pass::kBackward);
    const BlockTensors<const float> w(table_, l, params);
    const BlockTensors<float> dw(table_, l, grads);
    const ActivationLayout::Block& b = a.blocks[l - z.layer_begin];
    const float* residual =
        l == z.layer_begin ? act + a.input : act + a.blocks[l - 1 - z.layer_begin].residual3;

    zero(backend_, d + g.dfch_gelu, N * z.F);
    backend_.matmul_backward(d + g.dfch_gelu, dw.fcprojw, dw.fcprojb, dresidual, act + b.fch_gelu,
                             w.fcprojw, N, z.F, C);
    zero(backend_, d + g.dfch, N * z.F);
    backend_.gelu_backward(d + g.dfch, act + b.fch, d + g.dfch_gelu, N * z.F);
    zero(backend_, d + g.dln, N * C);
    backend_.matmul_backward(d + g.dln, dw.fcw, dw.fcb, d + g.dfch, act + b.ln2, w.fcw, N, C, z.F);
    tensor_all_reduce(d + g.dln, N * C, comm::ReduceOp::kSum);
    backend_.layernorm_backward(dresidual, dw.ln2w, dw.ln2b, d + g.dln, act + b.residual2, w.ln2w,
                                act + b.ln2_mean, act + b.ln2_rstd, N, C);
    zero(backend_, d + g.datty, N * z.Ca);
    backend_.matmul_backward(d + g.datty, dw.projw, dw.projb, dresidual, act + b.atty, w.projw, N,
                             z.Ca, C);
    zero(backend_, d + g.dqkv, N * 3 * z.Ca);
    backend_.attention_backward(d + g.dqkv, d + g.datt_scratch, d + g.datty, act + b.qkv,
                                act + b.att, B, T, z.Ca, z.NHa);
    zero(backend_, d + g.dln, N * C);
    backend_.matmul_backward(d + g.dln, dw.qkvw, dw.qkvb, d + g.dqkv, act + b.ln1, w.qkvw, N, C,
                             3 * z.Ca);
    tensor_all_reduce(d + g.dln, N * C, comm::ReduceOp::kSum);
    backend_.layernorm_backward(dresidual, dw.ln1w, dw.ln1b, d + g.dln, residual, w.ln1w,
                                act + b.ln1_mean, act + b.ln1_rstd, N, C);
    if (source_ != nullptr) source_->release_block(l, ParameterSource::Pass::kBackward);
    const auto [begin, end] = table_.layer_range(l);
    report(begin, end);
  }
  if (!z.first) {
    // The previous stage reads the input's gradient from the host's side.
    backend_.synchronize();
    return;
  }
  const core::TensorInfo& wte_info = table_.tensor(core::TensorRole::kWte);
  const core::TensorInfo& wpe_info = table_.tensor(core::TensorRole::kWpe);
  backend_.encoder_backward(grads + wte_info.offset, {z.vocab_begin, z.Vl},
                            grads + wpe_info.offset, dresidual, slot_inputs, B, T, C);
  if (source_ != nullptr) source_->release_embeddings();
  report(wte_info.offset, wpe_info.offset + wpe_info.numel);
}

void init_gpt2_parameters(const core::ParameterTable& table, uint64_t seed, float* params) {
  using core::TensorRole;
  const core::Gpt2Config& c = table.config();
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  std::vector<float> whole;  // a split tensor's global values, of which this rank keeps a slice
  for (const core::TensorInfo& t : table.tensors()) {
    float* out = params + t.offset;
    if (t.shape.size() == 1) {
      const bool gain = t.role == TensorRole::kLn1Weight || t.role == TensorRole::kLn2Weight ||
                        t.role == TensorRole::kLnfWeight;
      std::fill(out, out + t.numel, gain ? 1.0f : 0.0f);
      continue;
    }
    const bool residual_projection =
        t.role == TensorRole::kAttnProjWeight || t.role == TensorRole::kFcProjWeight;
    const double std = residual_projection ? residual_std : 0.02;
    const uint64_t stream = mix_seed(seed ^ mix_seed(t.global_index));
    if (t.split.whole()) {
      fill_normal(out, t.numel, std, stream);
      continue;
    }
    whole.resize(t.numel * t.split.parts);
    fill_normal(whole.data(), static_cast<int64_t>(whole.size()), std, stream);
    core::copy_out_of_global(t, whole.data(), out, sizeof(float));
  }
}

}  // namespace dslaunch::worker::model
