#pragma once

// Where the GPT-2 model keeps a micro-batch's activations: the widths a rank
// computes with and the offsets of every saved tensor. The model lays its
// buffers out by these, and `dslaunch plan` sizes them by the same.

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/layout/attention_scratch.h"
#include "core/layout/parameter_table.h"

namespace dslaunch::core {

// The widths one rank computes with: Megatron's tensor parallelism gives
// each of `parts` ranks NH/parts heads (Ca = C/parts attention channels),
// F = 4C/parts of the MLP's hidden units and Vl = Vp/parts vocabulary rows;
// the residual stream (C) stays whole on every rank. A model chunk (a
// pipeline stage, or one of its virtual stages) runs blocks [layer_begin,
// layer_end), the first the embeddings and the last the head (ln_f, the
// output layer and the loss). The chunk's first `recomputed` blocks keep only their output and are
// recomputed in the backward pass (activation checkpointing); with `partition`, an output that only
// feeds the next block is kept as this rank's 1/parts of it.
struct LocalSizes {
  int64_t parts, C, Ca, NHa, F, Vl;
  int64_t vocab_begin;  // the first vocabulary row this rank holds
  int64_t V;            // real vocabulary rows among them (may be 0)
  int layer_begin, layer_end;
  bool first, last;
  int recomputed;
  bool partition;

  LocalSizes(const core::ParameterTable& table, int chunk, int recompute_blocks,
             bool partition_activations) {
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
    std::tie(layer_begin, layer_end) = table.chunks().at(chunk);
    first = table.chunk_has_embeddings(chunk);
    last = table.chunk_has_head(chunk);
    recomputed = std::min(recompute_blocks, layer_end - layer_begin);
    partition = partition_activations && parts > 1;
  }

  bool recomputes(int layer) const { return layer < layer_begin + recomputed; }
  // Whether block `layer`'s output is kept as a 1/parts slice.
  bool partitions_output(int layer) const {
    return partition && recomputes(layer) && layer + 1 < layer_end;
  }
};

// A block's saved tensors, as offsets into one buffer.
struct BlockOffsets {
  int64_t ln1, ln1_mean, ln1_rstd;  // (B,T,C), (B,T), (B,T)
  int64_t qkv;                      // (B,T,3Ca): this rank's heads of q, k and v
  int64_t atty;                     // (B,T,Ca)
  int64_t residual2;                // (B,T,C)
  int64_t ln2, ln2_mean, ln2_rstd;  // (B,T,C), (B,T), (B,T)
  int64_t fch, fch_gelu;            // (B,T,F) each
};

// Hands out consecutive ranges of a buffer.
struct Allocator {
  int64_t total = 0;
  int64_t take(int64_t n) {
    const int64_t at = total;
    total += n;
    return at;
  }
  BlockOffsets block(const LocalSizes& z, int64_t B, int64_t T) {
    const int64_t N = B * T;
    BlockOffsets b{};
    b.ln1 = take(N * z.C);
    b.ln1_mean = take(N);
    b.ln1_rstd = take(N);
    b.qkv = take(N * 3 * z.Ca);
    b.atty = take(N * z.Ca);
    b.residual2 = take(N * z.C);
    b.ln2 = take(N * z.C);
    b.ln2_mean = take(N);
    b.ln2_rstd = take(N);
    b.fch = take(N * z.F);
    b.fch_gelu = take(N * z.F);
    return b;
  }
};

// One micro-batch's saved activations (one slot), in floats. Per block:
// what the backward pass reads (a recomputed block: its output only); the
// matrix products' outputs that feed a residual add go through `scratch`
// and are not kept.
struct ActivationLayout {
  int64_t input = 0;  // (B,T,C): the chunk's input (the embeddings' output on the first)
  std::vector<BlockOffsets> blocks;  // the chunk's, from layer_begin; unused for recomputed ones
  std::vector<int64_t> outputs;      // each block's output (B,T,C), or its slice
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
    Allocator a;
    input = a.take(N * z.C);
    for (int l = z.layer_begin; l < z.layer_end; ++l) {
      blocks.push_back(z.recomputes(l) ? BlockOffsets{} : a.block(z, B, T));
      outputs.push_back(a.take(z.partitions_output(l) ? N * z.C / z.parts : N * z.C));
    }
    if (z.last) {
      lnf = a.take(N * z.C);
      lnf_mean = a.take(N);
      lnf_rstd = a.take(N);
      logits = a.take(N * z.Vl);
      probs = a.take(N * z.Vl);
      losses = a.take(N);
      if (z.parts > 1) {
        row_max = a.take(N);
        sums = a.take(2 * N);
      }
    }
    scratch = a.take(N * z.C);
    total = a.total;
  }

  // The chunk's output: its last block's (the input when it has none).
  int64_t output() const { return outputs.empty() ? input : outputs.back(); }
};

// What recomputed blocks share, in one buffer beside the slots: one block's
// activations and, with partitioned outputs, two whole outputs to alternate
// between (a partitioned block's output is computed whole, then sliced) and
// a whole input gathered from the slices. Empty without activation
// checkpointing.
struct RecomputeLayout {
  BlockOffsets block{};
  int64_t outputs[2] = {0, 0};
  int64_t gathered = 0;
  int64_t total = 0;

  RecomputeLayout(const LocalSizes& z, int64_t B, int64_t T) {
    if (z.recomputed == 0) return;
    const int64_t N = B * T;
    Allocator a;
    block = a.block(z, B, T);
    if (z.partition) {
      outputs[0] = a.take(N * z.C);
      outputs[1] = a.take(N * z.C);
      gathered = a.take(N * z.C);
    }
    total = a.total;
  }
};

// The passes' temporaries, shared by every block and slot.
// `dresidual` carries the gradient of the residual stream: a stage that is
// not the last receives its output's gradient there, and a stage that is
// not the first leaves its input's gradient there. `attention` is the
// attention kernels' scratch, of the backend's kind (attention_scratch.h),
// for the forward pass too: no T×T matrix is kept from forward to
// backward, which recomputes the probabilities.
struct GradientLayout {
  int64_t dresidual, dln, datty, dqkv, dfch, dfch_gelu, attention, total = 0;

  GradientLayout(const LocalSizes& z, int64_t B, int64_t T, AttentionScratch kind) {
    const int64_t N = B * T;
    Allocator a;
    dresidual = a.take(N * z.C);
    dln = a.take(N * z.C);
    datty = a.take(N * z.Ca);
    dqkv = a.take(N * 3 * z.Ca);
    dfch = a.take(N * z.F);
    dfch_gelu = a.take(N * z.F);
    attention = a.take(attention_scratch_floats(kind, B, T));
    total = a.total;
  }
};

// The bytes of activations one model (chunk) holds: `slots` micro-batches of
// up to max_batch sequences and their token ids, and, `with_scratch`, the
// recompute buffer and the passes' temporaries, which a stage's
// chunks share (what Gpt2Model::activation_bytes() reports).
int64_t activation_bytes(const LocalSizes& sizes, int64_t max_batch, int64_t seq_len, int slots,
                         AttentionScratch attention, bool with_scratch = true);

}  // namespace dslaunch::core
