#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint/shard_file.h"
#include "tests/support/temp_files.h"

namespace dslaunch::core::testing {

using dslaunch::testing::read_bytes;
using dslaunch::testing::TempDir;
using dslaunch::testing::write_bytes;

// A value that says which state and which absolute index it is at, so a
// misplaced read shows.
float value_at(StateKind kind, int64_t index);

// value_at(kind, i) for i in [from, to).
std::vector<float> expected_values(StateKind kind, int64_t from, int64_t to);

// The three arrays a trainer saves (parameters and Adam's moments, fp32)
// over [begin, end), filled with value_at.
struct ShardData {
  std::vector<float> params;
  std::vector<float> adam_m;
  std::vector<float> adam_v;
  ShardData(int64_t begin, int64_t end);
  std::vector<ShardArrayData> arrays() const;
};

// A layout of one whole tensor of `total` elements: a flat buffer of that
// size, for tests that need no model.
std::vector<LayoutTensor> flat_layout(int64_t total);

}  // namespace dslaunch::core::testing
