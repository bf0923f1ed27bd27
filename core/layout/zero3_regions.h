#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/layout/parameter_table.h"

namespace dslaunch::core {

// How ZeRO stage 3 cuts a rank's parameter layout for gathering, for the
// worker that gathers by it and the plan that sizes its memory alike.
// Tensors with fewer than the persistence threshold's elements are
// persistent: kept whole on every rank, never gathered. The others fall in
// regions gathered and released as one: region 0 holds the position
// embedding and ln_f, region 1 + l block l, and region 1 + layers + k the
// token embedding's vocabulary chunk k (core/layout/vocab_chunks.h).
struct Zero3Regions {
  using Range = std::pair<int64_t, int64_t>;  // floats [begin, end) of the layout

  std::vector<Range> persistent;            // in layout order, adjacent ranges merged
  std::vector<std::vector<Range>> regions;  // as above
  int layers = 0;                           // of the model (regions 1 .. layers)
  int chunks = 0;                           // of the token embedding (0: it is persistent)

  Zero3Regions(const ParameterTable& table, int64_t persistence_threshold);

  int64_t region_size(int region) const;
  int64_t persistent_floats() const;
};

// Bytes of the whole pages of `page_bytes` that `ranges` (floats of a
// page-aligned buffer) touch: what they make resident.
int64_t page_span_bytes(const std::vector<Zero3Regions::Range>& ranges, int64_t page_bytes);

}  // namespace dslaunch::core
