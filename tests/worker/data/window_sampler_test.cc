#include "worker/data/window_sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "tests/worker/data/test_files.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::VectorSource;

WindowSampler make(TokenRange range, int64_t seq_len, uint64_t seed) {
  auto created = WindowSampler::create(range, seq_len, seed);
  REQUIRE(created.error.empty());
  return *created.sampler;
}

TEST_CASE("window_count counts windows of T + 1 tokens starting at multiples of T") {
  CHECK(window_count(0, 4) == 0);
  CHECK(window_count(4, 4) == 0);
  CHECK(window_count(5, 4) == 1);
  CHECK(window_count(8, 4) == 1);
  CHECK(window_count(9, 4) == 2);
  CHECK(window_count(1001, 10) == 100);
}

TEST_CASE("A sample is a window's inputs and its targets shifted by one") {
  const auto source = VectorSource::counting(200);
  const TokenRange range{&source, 50, 150};  // token value = position in the source
  const WindowSampler sampler = make(range, 8, 7);
  REQUIRE(sampler.windows() == 12);  // (100 - 1) / 8
  std::vector<int32_t> inputs(8);
  std::vector<int32_t> targets(8);
  for (int64_t g = 0; g < 30; ++g) {
    sampler.sample(g, inputs.data(), targets.data());
    const int32_t first = static_cast<int32_t>(50 + sampler.window_of(g) * 8);
    for (int32_t t = 0; t < 8; ++t) {
      REQUIRE(inputs[t] == first + t);
      REQUIRE(targets[t] == first + t + 1);
    }
  }
}

TEST_CASE("Each epoch visits every window exactly once, in its own order") {
  const auto source = VectorSource::counting(1'000);
  const WindowSampler sampler = make(whole(source), 3, 1234);
  const int64_t w = sampler.windows();
  REQUIRE(w == 333);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order;
    for (int64_t i = 0; i < w; ++i) order.push_back(sampler.window_of(epoch * w + i));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < w; ++i) REQUIRE(sorted[i] == i);
    orders.push_back(order);
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
}

TEST_CASE("Sampling is a pure function of (range, seq_len, seed, g)") {
  const auto source = VectorSource::counting(10'000);
  const WindowSampler a = make(whole(source), 16, 42);
  const WindowSampler b = make(whole(source), 16, 42);  // a resumed run's fresh sampler
  const WindowSampler other_seed = make(whole(source), 16, 43);
  std::vector<int64_t> from_a;
  std::vector<int64_t> from_other;
  for (int64_t g = 0; g < 200; ++g) {
    CHECK(a.window_of(g) == b.window_of(g));
    from_a.push_back(a.window_of(g));
    from_other.push_back(other_seed.window_of(g));
  }
  CHECK(from_a != from_other);
  // Pinned, so that a change to the sampling, which would silently change
  // what a resumed run reads, fails here.
  CHECK(std::vector<int64_t>(from_a.begin(), from_a.begin() + 8) ==
        std::vector<int64_t>{484, 571, 466, 195, 205, 483, 242, 580});
}

TEST_CASE("A step's samples do not depend on how the batch is split") {
  // (dp_size, micro_batch, accumulation steps), each a global batch of 8.
  struct Layout {
    int64_t dp_size, micro_batch, accumulation;
  };
  const auto source = VectorSource::counting(5'000);
  const WindowSampler sampler = make(whole(source), 32, 5);
  const auto samples_of_step = [&](const Layout& layout, int64_t step) {
    std::multiset<int64_t> windows;
    for (int64_t micro = 0; micro < layout.accumulation; ++micro) {
      for (int64_t rank = 0; rank < layout.dp_size; ++rank) {
        for (int64_t row = 0; row < layout.micro_batch; ++row) {
          const int64_t g = global_sample_index({.samples_before = step * 8,
                                                 .micro_step = micro,
                                                 .dp_size = layout.dp_size,
                                                 .dp_rank = rank,
                                                 .micro_batch = layout.micro_batch,
                                                 .row = row});
          CHECK(g >= step * 8);
          CHECK(g < (step + 1) * 8);
          windows.insert(sampler.window_of(g));
        }
      }
    }
    return windows;
  };
  for (const int64_t step : {0, 1, 17, 1000}) {
    const auto reference = samples_of_step({1, 1, 8}, step);
    CHECK(reference.size() == 8);
    for (const Layout layout : {Layout{1, 8, 1}, Layout{2, 4, 1}, Layout{2, 1, 4}, Layout{4, 2, 1},
                                Layout{8, 1, 1}, Layout{2, 2, 2}}) {
      CHECK(samples_of_step(layout, step) == reference);
    }
  }
}

TEST_CASE("A sampler needs a window") {
  const auto source = VectorSource::counting(16);
  const auto too_small = WindowSampler::create(whole(source), 16, 1);
  CHECK_FALSE(too_small.sampler.has_value());
  CHECK_THAT(too_small.error, Contains("16 tokens of test tokens") && Contains("17 tokens"));
  const auto zero_length = WindowSampler::create(whole(source), 0, 1);
  CHECK_FALSE(zero_length.sampler.has_value());
  CHECK_THAT(zero_length.error, Contains("sequence length 0"));
  CHECK(WindowSampler::create(whole(source), 15, 1).sampler->windows() == 1);
}

}  // namespace
}  // namespace dslaunch::worker::data
