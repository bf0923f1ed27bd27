#include "core/layout/pipeline_partition.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/layout/parameter_table.h"

namespace dslaunch::core {
namespace {

using Ranges = std::vector<std::pair<int, int>>;

// GPT-2 small's shape: 12 blocks of 7.1M parameters, a 38.6M-parameter
// token embedding.
Gpt2Config gpt2_small() {
  Gpt2Config c;
  c.num_layers = 12;
  c.channels = 768;
  c.num_heads = 12;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  c.max_seq_len = 1024;
  return c;
}

spec::ParallelismSpec stages(int count, spec::PipelinePartition method,
                             std::vector<int> layers = {}) {
  spec::ParallelismSpec parallel;
  parallel.pipeline = count;
  parallel.pipeline_partition = method;
  parallel.stage_layers = std::move(layers);
  return parallel;
}

// Each stage's parameters, as its ParameterTable holds them.
std::vector<int64_t> stage_parameters(const Gpt2Config& config, const Ranges& ranges) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < ranges.size(); ++s) {
    const ModelShard shard{.stage = static_cast<int>(s),
                           .stages = static_cast<int>(ranges.size()),
                           .chunks = {ranges[s]}};
    out.push_back(ParameterTable(config, shard).total());
  }
  return out;
}

TEST_CASE("uniform and explicit partitions give the blocks asked for") {
  const Gpt2Config c = gpt2_small();
  CHECK(stage_layer_ranges(c, stages(4, spec::PipelinePartition::kUniform)) ==
        Ranges{{0, 3}, {3, 6}, {6, 9}, {9, 12}});
  CHECK(stage_layer_ranges(c, stages(5, spec::PipelinePartition::kUniform)) ==
        Ranges{{0, 3}, {3, 6}, {6, 8}, {8, 10}, {10, 12}});
  CHECK(stage_layer_ranges(c, stages(3, spec::PipelinePartition::kExplicit, {2, 4, 6})) ==
        Ranges{{0, 2}, {2, 6}, {6, 12}});
  CHECK(stage_layer_ranges(c, stages(1, spec::PipelinePartition::kParameters)) ==
        Ranges{{0, 12}});
}

TEST_CASE("the parameters partition balances the stages' parameter counts, embeddings included") {
  const Gpt2Config c = gpt2_small();
  // The embeddings (39.4M) and the tied output layer (38.6M) outweigh five
  // blocks each: the first and last stages get one block.
  const Ranges ranges = stage_layer_ranges(c, stages(4, spec::PipelinePartition::kParameters));
  REQUIRE(ranges.size() == 4);
  CHECK(ranges.front() == std::pair{0, 1});
  CHECK(ranges.back() == std::pair{11, 12});
  for (size_t s = 1; s < ranges.size(); ++s) CHECK(ranges[s].first == ranges[s - 1].second);
  const std::vector<int64_t> balanced = stage_parameters(c, ranges);
  const std::vector<int64_t> uniform =
      stage_parameters(c, stage_layer_ranges(c, stages(4, spec::PipelinePartition::kUniform)));
  CHECK(*std::max_element(balanced.begin(), balanced.end()) <
        *std::max_element(uniform.begin(), uniform.end()));
  // No contiguous split of at least one block per stage does better: the
  // largest stage is the smallest it can be.
  int64_t best = INT64_MAX;
  for (int a = 1; a < 12; ++a) {
    for (int b = a + 1; b < 12; ++b) {
      for (int d = b + 1; d < 12; ++d) {
        const std::vector<int64_t> counts = stage_parameters(c, {{0, a}, {a, b}, {b, d}, {d, 12}});
        best = std::min(best, *std::max_element(counts.begin(), counts.end()));
      }
    }
  }
  CHECK(*std::max_element(balanced.begin(), balanced.end()) == best);
}

TEST_CASE("every stage keeps a block, however heavy the embeddings") {
  Gpt2Config c = gpt2_small();
  c.num_layers = 3;
  const Ranges ranges = stage_layer_ranges(c, stages(3, spec::PipelinePartition::kParameters));
  CHECK(ranges == Ranges{{0, 1}, {1, 2}, {2, 3}});
}

}  // namespace
}  // namespace dslaunch::core
