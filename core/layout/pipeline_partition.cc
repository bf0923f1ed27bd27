#include "core/layout/pipeline_partition.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/layout/parameter_table.h"

namespace dslaunch::core {
namespace {

// Contiguous runs of blocks, one per stage and each of at least one block,
// minimising the largest stage's parameters. `extra[s]` is what stage s
// holds besides its blocks. Dynamic programming over (stage, blocks so far):
// O(stages x blocks^2), instant for any real model.
std::vector<std::pair<int, int>> balance(int layers, int stages, int64_t per_block,
                                         const std::vector<int64_t>& extra) {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  // best[s][n]: the smallest possible largest stage when stages [0, s) hold
  // blocks [0, n); cut[s][n]: where stage s - 1 begins in that solution.
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(layers + 1, kNone));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(layers + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int n = s; n <= layers - (stages - s); ++n) {
      for (int begin = s - 1; begin < n; ++begin) {
        if (best[s - 1][begin] == kNone) continue;
        const int64_t stage = extra[s - 1] + per_block * (n - begin);
        const int64_t largest = std::max(best[s - 1][begin], stage);
        if (largest < best[s][n]) {
          best[s][n] = largest;
          cut[s][n] = begin;
        }
      }
    }
  }
  std::vector<std::pair<int, int>> ranges(stages);
  for (int s = stages, n = layers; s > 0; --s) {
    ranges[s - 1] = {cut[s][n], n};
    n = cut[s][n];
  }
  return ranges;
}

}  // namespace

std::vector<std::pair<int, int>> stage_layer_ranges(const Gpt2Config& config,
                                                    const spec::ParallelismSpec& parallel) {
  const int stages = parallel.virtual_stage_count();
  const int layers = static_cast<int>(config.num_layers);
  std::vector<std::pair<int, int>> ranges;
  switch (parallel.pipeline_partition) {
    case spec::PipelinePartition::kUniform:
      for (int s = 0; s < stages; ++s) ranges.push_back(uniform_stage_layers(layers, stages, s));
      return ranges;
    case spec::PipelinePartition::kExplicit: {
      int begin = 0;
      for (const int count : parallel.stage_layers) {
        ranges.emplace_back(begin, begin + count);
        begin += count;
      }
      return ranges;
    }
    case spec::PipelinePartition::kParameters:
      break;
  }
  const ParameterTable whole(config);
  const auto [block_begin, block_end] = whole.layer_range(0);
  const int64_t embeddings =
      whole.tensor(TensorRole::kWte).numel + whole.tensor(TensorRole::kWpe).numel;
  const int64_t head = whole.tensor(TensorRole::kLnfWeight).numel +
                       whole.tensor(TensorRole::kLnfBias).numel +
                       (stages > 1 ? whole.tensor(TensorRole::kWte).numel : 0);
  std::vector<int64_t> extra(stages, 0);
  extra.front() += embeddings;
  extra.back() += head;
  return balance(layers, stages, block_end - block_begin, extra);
}

std::vector<std::pair<int, int>> rank_chunks(const std::vector<std::pair<int, int>>& ranges,
                                             int stages, int stage) {
  std::vector<std::pair<int, int>> chunks;
  for (size_t v = stage; v < ranges.size(); v += stages) chunks.push_back(ranges[v]);
  return chunks;
}

}  // namespace dslaunch::core
