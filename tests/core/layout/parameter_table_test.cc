#include "core/layout/parameter_table.h"

#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

Gpt2Config small_config() {
  Gpt2Config c;
  c.num_layers = 3;
  c.channels = 8;
  c.num_heads = 4;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  c.max_seq_len = 6;
  return c;
}

ParameterTable tensor_slice(int rank, int size) {
  return ParameterTable(small_config(), ModelShard{.tensor_rank = rank, .tensor_size = size});
}

TEST_CASE("the whole model's table: HF order, contiguous, addressed by role") {
  const Gpt2Config c = small_config();
  const ParameterTable table(c);
  const int64_t C = c.channels;
  REQUIRE(table.tensors().size() == 2 + 12 * 3 + 2);
  int64_t offset = 0;
  for (size_t i = 0; i < table.tensors().size(); ++i) {
    const TensorInfo& t = table.tensors()[i];
    CHECK(t.global_index == static_cast<int>(i));
    CHECK(t.offset == offset);
    CHECK(t.shape == t.global_shape);
    CHECK(t.split.whole());
    CHECK(&table.tensor(t.role, t.layer) == &t);
    CHECK(table.find(t.name) == &t);
    offset += t.numel;
  }
  CHECK(table.total() == offset);
  CHECK(table.total() == 32 * C + 6 * C + 3 * (12 * C * C + 13 * C) + 2 * C);
  CHECK(table.bytes() == 4 * table.total());
  CHECK(table.tensor(TensorRole::kQkvWeight, 1).name == "transformer.h.1.attn.c_attn.weight");
  CHECK(table.tensor(TensorRole::kQkvWeight, 1).shape == std::vector<int64_t>{C, 3 * C});
  CHECK(table.tensor(TensorRole::kWte).offset == 0);
  const auto [begin, end] = table.layer_range(1);
  CHECK(begin == table.offset(TensorRole::kLn1Weight, 1));
  CHECK(end == table.offset(TensorRole::kLn1Weight, 2));
  CHECK(table.tensor(TensorRole::kFcWeight, 0).weight_decay);
  CHECK_FALSE(table.tensor(TensorRole::kFcBias, 0).weight_decay);
  CHECK(ParameterTable(c, DType::kBF16).bytes() == 2 * table.total());
}

TEST_CASE("tensor slices follow Megatron: which tensors split, along which dimension") {
  const ParameterTable r1 = tensor_slice(1, 2);
  const int64_t C = 8;
  using Shape = std::vector<int64_t>;
  CHECK(r1.tensor(TensorRole::kWte).shape == Shape{16, C});                // vocabulary rows
  CHECK(r1.tensor(TensorRole::kWpe).shape == Shape{6, C});                 // replicated
  CHECK(r1.tensor(TensorRole::kQkvWeight, 0).shape == Shape{C, 3 * C / 2});  // columns
  CHECK(r1.tensor(TensorRole::kQkvBias, 0).shape == Shape{3 * C / 2});
  CHECK(r1.tensor(TensorRole::kAttnProjWeight, 0).shape == Shape{C / 2, C});  // rows
  CHECK(r1.tensor(TensorRole::kAttnProjBias, 0).shape == Shape{C});           // replicated
  CHECK(r1.tensor(TensorRole::kFcWeight, 2).shape == Shape{C, 2 * C});
  CHECK(r1.tensor(TensorRole::kFcBias, 2).shape == Shape{2 * C});
  CHECK(r1.tensor(TensorRole::kFcProjWeight, 2).shape == Shape{2 * C, C});
  CHECK(r1.tensor(TensorRole::kLn2Weight, 2).shape == Shape{C});
  CHECK(r1.tensor(TensorRole::kLnfBias).shape == Shape{C});
  const ParameterTable whole(small_config());
  for (const TensorInfo& t : r1.tensors()) CHECK(t.global_shape == whole.at(t.name).global_shape);
}

TEST_CASE("the slices of every tensor tile its global values exactly once") {
  for (const int size : {2, 4}) {
    const ParameterTable whole(small_config());
    for (const TensorInfo& global : whole.tensors()) {
      std::vector<float> values(global.numel);
      std::iota(values.begin(), values.end(), 1.0f);
      std::vector<float> rebuilt(global.numel, 0.0f);
      std::multiset<float> seen;
      for (int rank = 0; rank < size; ++rank) {
        const ParameterTable slice = tensor_slice(rank, size);
        const TensorInfo& t = slice.at(global.name);
        std::vector<float> local(t.numel, -1.0f);
        copy_out_of_global(t, values.data(), local.data(), sizeof(float));
        seen.insert(local.begin(), local.end());
        copy_into_global(t, local.data(), rebuilt.data(), sizeof(float));
      }
      INFO(global.name << " across " << size << " ranks");
      CHECK(rebuilt == values);
      const ParameterTable slice = tensor_slice(0, size);
      const bool replicated = slice.at(global.name).split.whole();
      CHECK(static_cast<int64_t>(seen.size()) == (replicated ? size : 1) * global.numel);
    }
  }
}

TEST_CASE("a tensor rank's QKV slice holds its own heads of q, k and v") {
  // (C, 3C) = 8 x 24; 4 heads of 2 channels; rank 1 of 2 holds heads 2 and 3:
  // columns [4, 8) of q, [12, 16) of k, [20, 24) of v in every row.
  const ParameterTable slice = tensor_slice(1, 2);
  const TensorInfo& t = slice.tensor(TensorRole::kQkvWeight, 0);
  std::vector<float> global(8 * 24);
  std::iota(global.begin(), global.end(), 0.0f);
  std::vector<float> local(t.numel);
  copy_out_of_global(t, global.data(), local.data(), sizeof(float));
  for (int row = 0; row < 8; ++row) {
    for (int part = 0; part < 3; ++part) {
      for (int j = 0; j < 4; ++j) {
        CHECK(local[row * 12 + part * 4 + j] == global[row * 24 + part * 8 + 4 + j]);
      }
    }
  }
}

TEST_CASE("pipeline stages hold their blocks, the embeddings first, ln_f and the tied copy last") {
  const Gpt2Config c = small_config();
  CHECK(uniform_stage_layers(3, 2, 0) == std::pair{0, 2});
  CHECK(uniform_stage_layers(3, 2, 1) == std::pair{2, 3});
  CHECK(uniform_stage_layers(12, 4, 3) == std::pair{9, 12});
  const ParameterTable first(c, ModelShard{.stage = 0, .stages = 3, .chunks = {{0, 1}}});
  const ParameterTable middle(c, ModelShard{.stage = 1, .stages = 3, .chunks = {{1, 2}}});
  const ParameterTable last(c, ModelShard{.stage = 2, .stages = 3, .chunks = {{2, 3}}});
  CHECK(first.has_embeddings());
  CHECK(first.find("transformer.wpe.weight") != nullptr);
  CHECK(first.find("transformer.ln_f.weight") == nullptr);
  CHECK(first.find("transformer.h.1.ln_1.weight") == nullptr);
  CHECK(middle.find("transformer.wte.weight") == nullptr);
  CHECK(middle.tensors().size() == 12);
  CHECK(middle.tensors().front().offset == 0);
  CHECK(middle.tensor(TensorRole::kLn1Weight, 1).global_index == 2 + 12);
  CHECK_THROWS_AS(middle.tensor(TensorRole::kLn1Weight, 0), std::out_of_range);
  CHECK_THROWS_AS(middle.layer_range(2), std::out_of_range);
  // The last stage's own copy of the token embedding draws the same stream.
  CHECK(last.tensor(TensorRole::kWte).global_index == 0);
  CHECK(last.find("transformer.wpe.weight") == nullptr);
  CHECK(last.tensor(TensorRole::kLnfBias).global_index == 2 + 12 * 3 + 1);
  const int64_t C = c.channels;
  CHECK(first.total() + middle.total() + last.total() ==
        ParameterTable(c).total() + c.padded_vocab_size * C);
}

TEST_CASE("an interleaved stage holds its chunks' blocks in one buffer, embeddings and head at the "
          "ends of the virtual pipeline") {
  Gpt2Config c = small_config();
  c.num_layers = 4;
  // Two stages of two chunks each: virtual stages 0..3 hold one block each.
  const ParameterTable first(c, ModelShard{.stage = 0, .stages = 2, .chunks = {{0, 1}, {2, 3}}});
  const ParameterTable last(c, ModelShard{.stage = 1, .stages = 2, .chunks = {{1, 2}, {3, 4}}});
  CHECK(first.chunk_count() == 2);
  CHECK(first.chunk_has_embeddings(0));
  CHECK_FALSE(first.chunk_has_embeddings(1));
  CHECK_FALSE(first.chunk_has_head(1));
  CHECK_FALSE(last.chunk_has_head(0));
  CHECK(last.chunk_has_head(1));
  CHECK_FALSE(last.chunk_has_embeddings(0));
  // Blocks follow each other in layer order: block 2 right after block 0.
  CHECK(first.layer_range(2).first == first.layer_range(0).second);
  CHECK_THROWS_AS(first.layer_range(1), std::out_of_range);
  CHECK(last.find("transformer.ln_f.weight") != nullptr);
  CHECK(last.layer_range(3).second == last.offset(TensorRole::kLnfWeight));
  CHECK(first.total() + last.total() == ParameterTable(c).total() + c.padded_vocab_size * c.channels);
}

TEST_CASE("a shard the model cannot be cut into is refused, saying why") {
  Gpt2Config c = small_config();
  CHECK(shard_problem(c, ModelShard{}) == "");
  CHECK(shard_problem(c, ModelShard{.tensor_rank = 0, .tensor_size = 3}) ==
        "4 attention heads do not split across 3 tensor ranks");
  c.padded_vocab_size = 30;
  CHECK(shard_problem(c, ModelShard{.tensor_rank = 0, .tensor_size = 4}) ==
        "the padded vocabulary of 30 does not split across 4 tensor ranks");
  CHECK(shard_problem(small_config(), ModelShard{.tensor_rank = 2, .tensor_size = 2}) ==
        "tensor rank 2 is outside a tensor group of 2");
  CHECK(shard_problem(small_config(), ModelShard{.stage = 1, .stages = 1}) ==
        "pipeline stage 1 is outside 1 stages");
  CHECK(shard_problem(small_config(), ModelShard{.chunks = {{2, 4}}}) ==
        "blocks [2, 4) are outside the model's 3");
  CHECK(shard_problem(small_config(), ModelShard{.chunks = {{1, 2}, {0, 1}}}) ==
        "model chunk [0, 1) begins before the previous one ends (2)");
  CHECK(shard_problem(small_config(), ModelShard{.chunks = {{0, 1}, {1, 1}}}) ==
        "model chunk [1, 1) holds no block");
  CHECK_THROWS_AS(ParameterTable(small_config(), ModelShard{.tensor_rank = 0, .tensor_size = 3}),
                  std::invalid_argument);
}

}  // namespace
}  // namespace dslaunch::core
