// A partition kept in a swap file: any range stored and loaded back, the
// floats around it (in memory and in the file) left as they were.
#include "worker/parallel/partition_swap.h"

#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/temp_files.h"

namespace dslaunch::worker {
namespace {

TEST_CASE("ranges of any alignment store and load without touching their neighbours") {
  testing::TempDir dir;
  // A partition that starts and ends inside pages of the file.
  const int64_t own_begin = 1000, own_end = 1000 + 5 * 1024 + 77;
  // Pieces of 2 pages: most ranges move in several.
  auto made = PartitionSwap::create(dir.path(), own_begin, own_end, {}, 2048);
  REQUIRE(made.ok());
  PartitionSwap& swap = **made;
  std::vector<float> truth(own_end + 100);
  for (size_t i = 0; i < truth.size(); ++i) truth[i] = static_cast<float>(i) * 0.5f;
  REQUIRE(swap.store(own_begin, own_end, truth.data() + own_begin).ok());

  std::mt19937 engine(3);
  std::vector<float> memory(truth.size(), -1.0f);
  for (int round = 0; round < 200; ++round) {
    int64_t a = own_begin + static_cast<int64_t>(engine() % (own_end - own_begin));
    int64_t b = own_begin + static_cast<int64_t>(engine() % (own_end - own_begin + 1));
    if (a > b) std::swap(a, b);
    if (round % 2 == 0) {
      // New values for [a, b) go to the file.
      std::vector<float> update = truth;
      for (int64_t i = a; i < b; ++i) update[i] = static_cast<float>(engine() % 1000);
      REQUIRE(swap.store(a, b, update.data() + a).ok());
      for (int64_t i = a; i < b; ++i) truth[i] = update[i];
    } else {
      // A load writes exactly [a, b) of the buffer.
      std::vector<float> before = memory;
      REQUIRE(swap.load(a, b, memory.data() + a).ok());
      for (int64_t i = 0; i < static_cast<int64_t>(memory.size()); ++i) {
        INFO("round " << round << ", [" << a << ", " << b << "), float " << i);
        REQUIRE(memory[i] == (i >= a && i < b ? truth[i] : before[i]));
      }
    }
  }
  std::vector<float> all(truth.size());
  REQUIRE(swap.load(own_begin, own_end, all.data() + own_begin).ok());
  for (int64_t i = own_begin; i < own_end; ++i) REQUIRE(all[i] == truth[i]);
  // Outside the partition is refused.
  CHECK_FALSE(swap.load(own_begin - 1, own_end, all.data()).ok());
  CHECK_FALSE(swap.store(own_begin, own_end + 1, all.data()).ok());
  // The staging buffer holds one piece and its end pages, not the range.
  CHECK(swap.staging_bytes() <= (2048 + 2 * 1024) * 4);
}

TEST_CASE("a swap file in a folder that does not exist is refused, naming it") {
  auto made = PartitionSwap::create("/nonexistent-dslaunch-folder", 0, 10);
  REQUIRE_FALSE(made.ok());
  CHECK_THAT(made.status().message(), Catch::Contains("/nonexistent-dslaunch-folder"));
}

}  // namespace
}  // namespace dslaunch::worker
