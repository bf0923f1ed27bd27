#include "tests/core/checkpoint/test_shards.h"

#include <catch2/catch.hpp>

namespace dslaunch::core::testing {

float value_at(StateKind kind, int64_t index) {
  // Exact in float (a multiple of 1/4 below 2^22) for the indices tests use.
  return static_cast<float>(static_cast<int>(kind)) * 1e6f + static_cast<float>(index) + 0.25f;
}

std::vector<float> expected_values(StateKind kind, int64_t from, int64_t to) {
  std::vector<float> values;
  for (int64_t i = from; i < to; ++i) values.push_back(value_at(kind, i));
  return values;
}

ShardData::ShardData(int64_t begin, int64_t end)
    : params(expected_values(StateKind::kParameter, begin, end)),
      adam_m(expected_values(StateKind::kAdamM, begin, end)),
      adam_v(expected_values(StateKind::kAdamV, begin, end)) {}

std::vector<ShardArrayData> ShardData::arrays() const {
  return {{{StateKind::kParameter, DType::kF32}, params.data()},
          {{StateKind::kAdamM, DType::kF32}, adam_m.data()},
          {{StateKind::kAdamV, DType::kF32}, adam_v.data()}};
}

std::vector<LayoutTensor> flat_layout(int64_t total) {
  return {LayoutTensor{.name = "flat",
                       .global_shape = {total},
                       .split = TensorSplit{.view = {total}, .dim = 0, .index = 0, .parts = 1},
                       .offset = 0,
                       .numel = total}};
}

}  // namespace dslaunch::core::testing
