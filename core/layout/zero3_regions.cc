#include "core/layout/zero3_regions.h"

#include <algorithm>

#include "core/layout/vocab_chunks.h"

namespace dslaunch::core {
namespace {

// Appends [begin, end) to ranges, merged with the last one when adjacent.
void append(std::vector<Zero3Regions::Range>& ranges, int64_t begin, int64_t end) {
  if (!ranges.empty() && ranges.back().second == begin) {
    ranges.back().second = end;
  } else {
    ranges.emplace_back(begin, end);
  }
}

int64_t floats_in(const std::vector<Zero3Regions::Range>& ranges) {
  int64_t floats = 0;
  for (const auto& [begin, end] : ranges) floats += end - begin;
  return floats;
}

}  // namespace

Zero3Regions::Zero3Regions(const ParameterTable& table, int64_t persistence_threshold)
    : regions(1 + table.config().num_layers), layers(static_cast<int>(table.config().num_layers)) {
  for (const TensorInfo& t : table.tensors()) {
    const int64_t end = t.offset + t.numel;
    if (t.numel < persistence_threshold) {
      append(persistent, t.offset, end);
    } else if (t.role == TensorRole::kWte) {
      const int64_t C = table.config().channels;
      const VocabChunks vocab(t.numel / C, C);
      chunks = vocab.count();
      for (int k = 0; k < chunks; ++k) {
        regions.push_back({{t.offset + vocab.begin(k) * C, t.offset + vocab.end(k) * C}});
      }
    } else {
      append(regions[t.layer + 1], t.offset, end);
    }
  }
}

int64_t Zero3Regions::region_size(int region) const { return floats_in(regions[region]); }

int64_t Zero3Regions::persistent_floats() const { return floats_in(persistent); }

int64_t page_span_bytes(const std::vector<Zero3Regions::Range>& ranges, int64_t page_bytes) {
  constexpr int64_t kFloat = 4;
  int64_t bytes = 0;
  for (const auto& [begin, end] : ranges) {
    bytes +=
        ((end * kFloat + page_bytes - 1) / page_bytes - begin * kFloat / page_bytes) * page_bytes;
  }
  return bytes;
}

}  // namespace dslaunch::core
