#include "core/layout/zero3_regions.h"

#include <algorithm>
#include <initializer_list>

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

int64_t device_gathered_bytes(const Zero3Regions& regions, int64_t page_bytes) {
  // The distinct pages a set of regions and the persistent tensors touch
  // (neighbouring ranges share the page between them).
  const auto resident = [&](std::initializer_list<int> live) {
    std::vector<std::pair<int64_t, int64_t>> pages;  // [first, last) of each range
    const auto add = [&](const std::vector<Zero3Regions::Range>& ranges) {
      for (const auto& [begin, end] : ranges) {
        pages.emplace_back(begin * 4 / page_bytes, (end * 4 + page_bytes - 1) / page_bytes);
      }
    };
    add(regions.persistent);
    for (const int region : live) {
      if (region >= 0) add(regions.regions[region]);
    }
    std::sort(pages.begin(), pages.end());
    int64_t count = 0;
    int64_t covered = 0;  // pages before this are counted
    for (const auto& [first, last] : pages) {
      count += std::max<int64_t>(0, last - std::max(first, covered));
      covered = std::max(covered, last);
    }
    return count * page_bytes;
  };
  // What is live at once: the embeddings' region with a block, or with the
  // last block and a vocabulary chunk (the output layer's), or with a chunk
  // alone (the encoder's).
  const int last = regions.layers;  // the last block's region
  int64_t most = resident({0});
  for (int layer = 0; layer < regions.layers; ++layer) {
    most = std::max(most, resident({0, 1 + layer}));
  }
  for (int k = 0; k < regions.chunks; ++k) {
    most = std::max(most, resident({0, last > 0 ? last : -1, 1 + regions.layers + k}));
  }
  return most;
}

}  // namespace dslaunch::core
