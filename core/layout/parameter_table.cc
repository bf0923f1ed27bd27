#include "core/layout/parameter_table.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace dslaunch::core {
namespace {

constexpr int kOuterWte = 0;
constexpr int kOuterWpe = 1;
constexpr int kOuterLnfWeight = 2;
constexpr int kOuterLnfBias = 3;

bool is_block_role(TensorRole role) {
  return role >= TensorRole::kLn1Weight && role <= TensorRole::kFcProjBias;
}

int block_slot(TensorRole role) {
  return static_cast<int>(role) - static_cast<int>(TensorRole::kLn1Weight);
}

int outer_slot(TensorRole role) {
  switch (role) {
    case TensorRole::kWte:
      return kOuterWte;
    case TensorRole::kWpe:
      return kOuterWpe;
    case TensorRole::kLnfWeight:
      return kOuterLnfWeight;
    case TensorRole::kLnfBias:
      return kOuterLnfBias;
    default:
      return -1;
  }
}

// The position of a tensor in the whole model's order: wte, wpe, 12 per
// block, ln_f weight and bias.
int global_index_of(TensorRole role, int layer, int64_t num_layers) {
  if (is_block_role(role)) return 2 + layer * kBlockRoles + block_slot(role);
  switch (role) {
    case TensorRole::kWte:
      return 0;
    case TensorRole::kWpe:
      return 1;
    case TensorRole::kLnfWeight:
      return 2 + static_cast<int>(num_layers) * kBlockRoles;
    default:
      return 3 + static_cast<int>(num_layers) * kBlockRoles;
  }
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

// The split's geometry over the global view: `outer` runs of `global_run`
// elements, of which this rank holds `local_run` starting at `start`.
struct Runs {
  int64_t outer = 1;
  int64_t global_run = 0;
  int64_t local_run = 0;
  int64_t start = 0;
};

Runs runs_of(const TensorSplit& split) {
  Runs runs;
  int64_t inner = 1;
  for (size_t d = split.dim + 1; d < split.view.size(); ++d) inner *= split.view[d];
  for (int d = 0; d < split.dim; ++d) runs.outer *= split.view[d];
  const int64_t piece = split.view[split.dim] / split.parts;
  runs.global_run = split.view[split.dim] * inner;
  runs.local_run = piece * inner;
  runs.start = split.index * piece * inner;
  return runs;
}

}  // namespace

std::string hf_gpt2_name(TensorRole role, int layer) {
  static constexpr const char* kBlockNames[kBlockRoles] = {
      "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  if (is_block_role(role)) return fmt::format("transformer.h.{}.{}", layer, kBlockNames[block_slot(role)]);
  switch (role) {
    case TensorRole::kWte:
      return "transformer.wte.weight";
    case TensorRole::kWpe:
      return "transformer.wpe.weight";
    case TensorRole::kLnfWeight:
      return "transformer.ln_f.weight";
    default:
      return "transformer.ln_f.bias";
  }
}

std::pair<int, int> uniform_stage_layers(int64_t num_layers, int stages, int stage) {
  const int64_t base = num_layers / stages;
  const int64_t extra = num_layers % stages;
  const int64_t begin = stage * base + std::min<int64_t>(stage, extra);
  const int64_t end = begin + base + (stage < extra ? 1 : 0);
  return {static_cast<int>(begin), static_cast<int>(end)};
}

std::string shard_problem(const Gpt2Config& c, const ModelShard& shard) {
  if (shard.tensor_size < 1 || shard.tensor_rank < 0 || shard.tensor_rank >= shard.tensor_size) {
    return fmt::format("tensor rank {} is outside a tensor group of {}", shard.tensor_rank,
                       shard.tensor_size);
  }
  if (shard.stages < 1 || shard.stage < 0 || shard.stage >= shard.stages) {
    return fmt::format("pipeline stage {} is outside {} stages", shard.stage, shard.stages);
  }
  int previous_end = 0;
  for (const auto& [begin, end] : shard.chunks) {
    if (begin < 0 || begin > end || end > c.num_layers) {
      return fmt::format("blocks [{}, {}) are outside the model's {}", begin, end, c.num_layers);
    }
    if (begin < previous_end) {
      return fmt::format("model chunk [{}, {}) begins before the previous one ends ({})", begin,
                         end, previous_end);
    }
    if (begin == end && shard.chunks.size() > 1) {
      return fmt::format("model chunk [{}, {}) holds no block", begin, end);
    }
    previous_end = end;
  }
  const int64_t t = shard.tensor_size;
  if (c.num_heads % t != 0) {
    return fmt::format("{} attention heads do not split across {} tensor ranks", c.num_heads, t);
  }
  if (c.padded_vocab_size % t != 0) {
    return fmt::format("the padded vocabulary of {} does not split across {} tensor ranks",
                       c.padded_vocab_size, t);
  }
  return "";
}

ParameterTable::ParameterTable(const Gpt2Config& config, DType dtype)
    : ParameterTable(config, ModelShard{}, dtype) {}

ParameterTable::ParameterTable(const Gpt2Config& config, const ModelShard& shard, DType dtype)
    : config_(config), shard_(shard), dtype_(dtype) {
  if (const std::string problem = shard_problem(config, shard); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (shard_.chunks.empty()) shard_.chunks = {{0, static_cast<int>(config.num_layers)}};
  const int64_t C = config.channels;
  const int t = shard_.tensor_size;
  const int r = shard_.tensor_rank;
  const TensorSplit whole;
  auto cut = [&](std::vector<int64_t> view, int dim) { return TensorSplit{std::move(view), dim, r, t}; };
  const bool tied_copy = has_head() && shard_.stages > 1;
  if (has_embeddings() || tied_copy) {
    add(TensorRole::kWte, -1, {config.padded_vocab_size, C}, cut({config.padded_vocab_size, C}, 0),
        true);
  }
  if (has_embeddings()) add(TensorRole::kWpe, -1, {config.max_seq_len, C}, whole, true);
  block_index_.resize(config.num_layers);
  for (int l = 0; l < static_cast<int>(config.num_layers); ++l) block_index_[l].fill(-1);
  for (const auto& [begin, end] : shard_.chunks) {
    for (int l = begin; l < end; ++l) add_block(l);
  }
  if (has_head()) {
    add(TensorRole::kLnfWeight, -1, {C}, whole, false);
    add(TensorRole::kLnfBias, -1, {C}, whole, false);
  }
}

void ParameterTable::add_block(int l) {
  const int64_t C = config_.channels;
  const int t = shard_.tensor_size;
  const int r = shard_.tensor_rank;
  const TensorSplit whole;
  auto cut = [&](std::vector<int64_t> view, int dim) { return TensorSplit{std::move(view), dim, r, t}; };
  add(TensorRole::kLn1Weight, l, {C}, whole, false);
  add(TensorRole::kLn1Bias, l, {C}, whole, false);
  add(TensorRole::kQkvWeight, l, {C, 3 * C}, cut({C, 3, C}, 2), true);
  add(TensorRole::kQkvBias, l, {3 * C}, cut({3, C}, 1), false);
  add(TensorRole::kAttnProjWeight, l, {C, C}, cut({C, C}, 0), true);
  add(TensorRole::kAttnProjBias, l, {C}, whole, false);
  add(TensorRole::kLn2Weight, l, {C}, whole, false);
  add(TensorRole::kLn2Bias, l, {C}, whole, false);
  add(TensorRole::kFcWeight, l, {C, 4 * C}, cut({C, 4 * C}, 1), true);
  add(TensorRole::kFcBias, l, {4 * C}, cut({4 * C}, 0), false);
  add(TensorRole::kFcProjWeight, l, {4 * C, C}, cut({4 * C, C}, 0), true);
  add(TensorRole::kFcProjBias, l, {C}, whole, false);
}

void ParameterTable::add(TensorRole role, int layer, std::vector<int64_t> global_shape,
                         TensorSplit split, bool weight_decay) {
  if (split.view.empty()) split.view = global_shape;
  if (split.parts == 1) split.index = 0;
  // The slice's shape: the global shape with the cut dimension divided;
  // where the view regroups the global shape (the fused QKV's (C, 3, C)),
  // the cut is within the last global dimension.
  std::vector<int64_t> shape = global_shape;
  if (split.view == global_shape) {
    shape[split.dim] /= split.parts;
  } else {
    shape.back() /= split.parts;
  }
  TensorInfo info;
  info.role = role;
  info.layer = layer;
  info.global_index = global_index_of(role, layer, config_.num_layers);
  info.name = hf_gpt2_name(role, layer);
  info.global_shape = std::move(global_shape);
  info.shape = std::move(shape);
  info.split = std::move(split);
  info.offset = total_;
  info.numel = product(info.shape);
  info.weight_decay = weight_decay;
  total_ += info.numel;
  const int index = static_cast<int>(tensors_.size());
  if (is_block_role(role)) {
    block_index_[layer][block_slot(role)] = index;
  } else {
    outer_index_[outer_slot(role)] = index;
  }
  tensors_.push_back(std::move(info));
}

const TensorInfo& ParameterTable::tensor(TensorRole role, int layer) const {
  int index = -1;
  if (is_block_role(role)) {
    if (layer >= 0 && layer < static_cast<int>(block_index_.size())) {
      index = block_index_[layer][block_slot(role)];
    }
  } else {
    index = outer_index_[outer_slot(role)];
  }
  if (index < 0) {
    throw std::out_of_range(fmt::format("this rank holds no {} (stage {} of {})",
                                        hf_gpt2_name(role, layer), shard_.stage, shard_.stages));
  }
  return tensors_[index];
}

const TensorInfo* ParameterTable::find(const std::string& name) const {
  for (const TensorInfo& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

const TensorInfo& ParameterTable::at(const std::string& name) const {
  if (const TensorInfo* tensor = find(name)) return *tensor;
  throw std::out_of_range("no parameter tensor named " + name);
}

std::pair<int64_t, int64_t> ParameterTable::layer_range(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(block_index_.size()) || block_index_[layer][0] < 0) {
    throw std::out_of_range(fmt::format("no block {} on this rank (stage {} of {})", layer,
                                        shard_.stage, shard_.stages));
  }
  const TensorInfo& first = tensors_[block_index_[layer].front()];
  const TensorInfo& last = tensors_[block_index_[layer].back()];
  return {first.offset, last.offset + last.numel};
}

std::vector<SliceRun> slice_runs(const TensorSplit& split, int64_t from, int64_t to) {
  std::vector<SliceRun> runs;
  if (from >= to) return runs;
  if (split.whole()) return {SliceRun{from, from, to - from}};
  const Runs geometry = runs_of(split);
  for (int64_t row = from / geometry.local_run; row * geometry.local_run < to; ++row) {
    const int64_t begin = std::max(from, row * geometry.local_run);
    const int64_t end = std::min(to, (row + 1) * geometry.local_run);
    const int64_t global = row * geometry.global_run + geometry.start + (begin - row * geometry.local_run);
    if (!runs.empty() && runs.back().global + runs.back().count == global) {
      runs.back().count += end - begin;  // a cut along the first dimension: rows join up
    } else {
      runs.push_back({begin, global, end - begin});
    }
  }
  return runs;
}

void copy_out_of_global(const TensorInfo& tensor, const void* global, void* local,
                        int64_t bytes_per_element) {
  const auto* from = static_cast<const char*>(global);
  auto* to = static_cast<char*>(local);
  if (tensor.split.whole()) {
    std::memcpy(to, from, tensor.numel * bytes_per_element);
    return;
  }
  const Runs runs = runs_of(tensor.split);
  for (int64_t o = 0; o < runs.outer; ++o) {
    std::memcpy(to + o * runs.local_run * bytes_per_element,
                from + (o * runs.global_run + runs.start) * bytes_per_element,
                runs.local_run * bytes_per_element);
  }
}

void copy_into_global(const TensorInfo& tensor, const void* local, void* global,
                      int64_t bytes_per_element) {
  const auto* from = static_cast<const char*>(local);
  auto* to = static_cast<char*>(global);
  if (tensor.split.whole()) {
    std::memcpy(to, from, tensor.numel * bytes_per_element);
    return;
  }
  const Runs runs = runs_of(tensor.split);
  for (int64_t o = 0; o < runs.outer; ++o) {
    std::memcpy(to + (o * runs.global_run + runs.start) * bytes_per_element,
                from + o * runs.local_run * bytes_per_element, runs.local_run * bytes_per_element);
  }
}

}  // namespace dslaunch::core
