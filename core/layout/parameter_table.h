#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/layout/gpt2_config.h"

namespace dslaunch::core {

// What a parameter tensor is in the model, whatever its name in a file.
enum class TensorRole {
  kWte,  // token embedding (Vp, C), also the tied output layer
  kWpe,  // position embedding (maxT, C)
  kLn1Weight,
  kLn1Bias,
  kQkvWeight,  // (C, 3C): [q | k | v]
  kQkvBias,
  kAttnProjWeight,  // (C, C)
  kAttnProjBias,
  kLn2Weight,
  kLn2Bias,
  kFcWeight,  // (C, 4C)
  kFcBias,
  kFcProjWeight,  // (4C, C)
  kFcProjBias,
  kLnfWeight,
  kLnfBias,
};
inline constexpr int kBlockRoles = 12;  // kLn1Weight .. kFcProjBias, in block order

// The Hugging Face GPT-2 name of a role's tensor in block `layer` (ignored
// for the embeddings and ln_f), e.g. "transformer.h.3.attn.c_attn.weight".
std::string hf_gpt2_name(TensorRole role, int layer);

// How a tensor is cut across the tensor-parallel group. The global tensor is
// viewed with shape `view` (the same elements, row-major; for the fused QKV
// projection (C, 3C) becomes (C, 3, C) so that each rank takes its heads of
// q, k and v alike); dimension `dim` of the view is cut into `parts` equal
// pieces and this rank holds piece `index`. parts == 1: the rank holds all.
struct TensorSplit {
  std::vector<int64_t> view;
  int dim = 0;
  int index = 0;
  int parts = 1;
  bool whole() const { return parts == 1; }
};

// One parameter tensor of this rank's buffer.
struct TensorInfo {
  TensorRole role = TensorRole::kWte;
  int layer = -1;                     // transformer block, or -1 for embeddings and ln_f
  int global_index = 0;  // position in the whole model's tensor order: the same on every layout
  std::string name;                   // Hugging Face GPT-2 name, for files and messages only
  std::vector<int64_t> global_shape;  // linear weights in Conv1D layout, (in, out)
  std::vector<int64_t> shape;         // this rank's slice
  TensorSplit split;
  int64_t offset = 0;  // in elements, from the start of the buffer
  int64_t numel = 0;   // of the slice
  bool weight_decay = false;  // matrices and embeddings decay; biases and norms do not
};

// The part of the model one rank holds: its slice of the tensor-parallel
// group (Megatron's: QKV and MLP-up split by columns with their biases,
// attention and MLP-down projections by rows, the token embedding by
// vocabulary rows; layernorms, row-parallel biases and the position
// embedding replicated) and its pipeline stage's blocks. The first stage
// holds the embeddings, the last ln_f and, when there are several stages,
// its own copy of the token embedding for the tied output layer. Under the
// interleaved schedule a stage runs several model chunks (virtual stages
// stage, stage + stages, ...): the embeddings go with the first stage's
// first chunk, the head with the last stage's last.
struct ModelShard {
  int tensor_rank = 0;
  int tensor_size = 1;
  int stage = 0;
  int stages = 1;
  // Each chunk's blocks [begin, end), in increasing order; empty: one chunk
  // of every block.
  std::vector<std::pair<int, int>> chunks = {};
};

// Blocks [begin, end) of stage `stage` of `stages` when the blocks are
// split evenly (the remainder to the first stages).
std::pair<int, int> uniform_stage_layers(int64_t num_layers, int stages, int stage);

// "" when `shard` can be cut from a model of this shape, otherwise why not.
std::string shard_problem(const Gpt2Config& config, const ModelShard& shard);

// The one owner of tensor layout: every tensor this rank holds, its global
// shape and its slice, in one flat buffer (and the gradient and optimizer
// buffers, which share its layout). Order: wte, wpe, every block's tensors
// contiguously (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj),
// then ln_f: a block is one contiguous range, which is what bucketed
// gradient reduction and per-layer gathering work on. On the hot path,
// tensors are addressed by role and layer (tensor(), offset()), not by name.
class ParameterTable {
 public:
  // The whole model, as one rank without tensor or pipeline parallelism holds it.
  explicit ParameterTable(const Gpt2Config& config, DType dtype = DType::kF32);
  // Throws std::invalid_argument when shard_problem() is not empty.
  ParameterTable(const Gpt2Config& config, const ModelShard& shard, DType dtype = DType::kF32);

  const Gpt2Config& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  DType dtype() const { return dtype_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  int64_t total() const { return total_; }  // elements in the whole buffer
  int64_t bytes() const { return total_ * dtype_bytes(dtype_); }

  bool has_embeddings() const { return shard_.stage == 0; }
  bool has_head() const { return shard_.stage == shard_.stages - 1; }  // ln_f and the output layer
  // The model chunks' blocks (shard().chunks, never empty: one chunk of every
  // block when the shard named none), and which chunk runs the embeddings
  // and which the head.
  const std::vector<std::pair<int, int>>& chunks() const { return shard_.chunks; }
  int chunk_count() const { return static_cast<int>(shard_.chunks.size()); }
  bool chunk_has_embeddings(int chunk) const { return has_embeddings() && chunk == 0; }
  bool chunk_has_head(int chunk) const { return has_head() && chunk == chunk_count() - 1; }

  // The tensor of `role` in block `layer` (layer ignored for the embeddings
  // and ln_f); throws std::out_of_range when this rank does not hold it.
  const TensorInfo& tensor(TensorRole role, int layer = -1) const;
  int64_t offset(TensorRole role, int layer = -1) const { return tensor(role, layer).offset; }

  // By Hugging Face name, for files and tests: nullptr if this rank holds
  // no tensor of that name.
  const TensorInfo* find(const std::string& name) const;
  // As find(); throws std::out_of_range.
  const TensorInfo& at(const std::string& name) const;
  // [begin, end) in elements of block `layer`'s tensors.
  std::pair<int64_t, int64_t> layer_range(int layer) const;

 private:
  void add_block(int layer);  // its 12 tensors, in block order
  void add(TensorRole role, int layer, std::vector<int64_t> global_shape, TensorSplit split,
           bool weight_decay);

  Gpt2Config config_;
  ModelShard shard_;
  DType dtype_;
  std::vector<TensorInfo> tensors_;
  int64_t total_ = 0;
  // tensors_ index by role for embeddings and ln_f, by (layer, role) for
  // blocks; -1 where this rank holds none.
  std::array<int, 4> outer_index_{-1, -1, -1, -1};
  std::vector<std::array<int, kBlockRoles>> block_index_;
};

// Elements of a slice that are consecutive in the global tensor too:
// slice elements [local, local + count) are global elements [global,
// global + count).
struct SliceRun {
  int64_t local = 0;
  int64_t global = 0;
  int64_t count = 0;
};
// The runs that make up elements [from, to) of the slice `split` cuts, in
// increasing order of both indices (a whole tensor or a cut along its first
// dimension is one run; a cut along a later dimension, one per outer row).
std::vector<SliceRun> slice_runs(const TensorSplit& split, int64_t from, int64_t to);

// Copies this rank's slice of a tensor out of the whole (global) tensor, and
// back: element types of `bytes_per_element` bytes.
void copy_out_of_global(const TensorInfo& tensor, const void* global, void* local,
                        int64_t bytes_per_element);
void copy_into_global(const TensorInfo& tensor, const void* local, void* global,
                      int64_t bytes_per_element);

}  // namespace dslaunch::core
