#include "worker/data/blended_sampler.h"

#include <cmath>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "worker/data/concatenated_source.h"
#include "worker/data/window_sampler.h"

namespace dslaunch::worker::data {
namespace {

// Tokens base, base + 1, ... : every token tells where it came from.
class CountingSource final : public TokenSource {
 public:
  CountingSource(int64_t size, int32_t base) : size_(size), base_(base) {}
  int64_t size() const override { return size_; }
  void read(int64_t offset, int64_t count, int32_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = base_ + static_cast<int32_t>(offset + i);
  }
  int32_t max_token() const override { return base_ + static_cast<int32_t>(size_) - 1; }
  std::string describe() const override { return "counting"; }

 private:
  int64_t size_;
  int32_t base_;
};

TEST_CASE("a blend of one dataset draws what the plain window sampler draws") {
  const CountingSource source(1'000, 0);
  const BlendedSamplerResult blend = BlendedSampler::create({whole(source)}, {1.0}, 8, 42);
  REQUIRE(blend.sampler);
  const WindowSamplerResult plain = WindowSampler::create(whole(source), 8, 42);
  REQUIRE(plain.sampler);
  std::vector<int32_t> in_a(8), out_a(8), in_b(8), out_b(8);
  for (const int64_t g : {0, 1, 7, 124, 125, 999, 5}) {
    CHECK(blend.sampler->locate(g) == std::pair<int, int64_t>{0, g});
    blend.sampler->sample(g, in_a.data(), out_a.data());
    plain.sampler->sample(g, in_b.data(), out_b.data());
    CHECK(in_a == in_b);
    CHECK(out_a == out_b);
  }
}

TEST_CASE("a blend assigns samples as Megatron's BlendedDataset does") {
  const CountingSource a(1'000, 0);
  const CountingSource b(1'000, 10'000);
  const BlendedSamplerResult blend =
      BlendedSampler::create({whole(a), whole(b)}, {3.0, 7.0}, 8, 42);  // 0.3 and 0.7
  REQUIRE(blend.sampler);
  // The first twelve, worked by hand from weight · max(g, 1) − taken.
  const std::vector<std::pair<int, int64_t>> expected = {{1, 0}, {0, 0}, {1, 1}, {1, 2},
                                                         {0, 1}, {1, 3}, {1, 4}, {0, 2},
                                                         {1, 5}, {1, 6}, {0, 3}, {1, 7}};
  for (int64_t g = 0; g < 12; ++g) CHECK(blend.sampler->locate(g) == expected[g]);
  // Out of order: the walk starts again and finds the same answers.
  CHECK(blend.sampler->locate(4) == expected[4]);
  CHECK(blend.sampler->locate(11) == expected[11]);
  // Each dataset's share stays within one sample of its weight.
  int64_t first = 0;
  for (int64_t g = 0; g < 10'000; ++g) first += blend.sampler->locate(g).first == 0 ? 1 : 0;
  CHECK(std::abs(first - 3'000) <= 1);
  // A sample's tokens come from its dataset.
  std::vector<int32_t> inputs(8), targets(8);
  blend.sampler->sample(0, inputs.data(), targets.data());
  CHECK(inputs[0] >= 10'000);
  blend.sampler->sample(1, inputs.data(), targets.data());
  CHECK(inputs[0] < 10'000);
}

TEST_CASE("a blend refuses a dataset without a window and a weight that is not positive") {
  const CountingSource a(1'000, 0);
  const CountingSource tiny(5, 0);
  CHECK_FALSE(BlendedSampler::create({whole(a), whole(tiny)}, {1, 1}, 8, 1).sampler);
  const BlendedSamplerResult zero = BlendedSampler::create({whole(a), whole(a)}, {1, 0}, 8, 1);
  CHECK_FALSE(zero.sampler);
  CHECK_THAT(zero.error, Catch::Contains("not positive"));
}

TEST_CASE("a concatenated source reads across its parts, empty ones included") {
  const CountingSource a(10, 0);
  const CountingSource b(5, 100);
  const CountingSource empty(0, 0);
  const ConcatenatedSource joined({whole(a), {&empty, 0, 0}, {&b, 1, 5}});
  CHECK(joined.size() == 14);
  CHECK(joined.max_token() == 104);
  std::vector<int32_t> tokens(6);
  joined.read(8, 6, tokens.data());
  CHECK(tokens == std::vector<int32_t>{8, 9, 101, 102, 103, 104});
}

}  // namespace
}  // namespace dslaunch::worker::data
