#include "worker/parallel/gradient_partition.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "tests/support/temp_files.h"

namespace dslaunch::worker {
namespace {

// Adds `values` to floats [begin, end) of the partition.
core::Status add_values(GradientPartition& grads, int64_t begin, const std::vector<float>& values) {
  return grads.add(begin, begin + static_cast<int64_t>(values.size()),
                   [&](float* own, int64_t first, int64_t count) {
                     for (int64_t i = 0; i < count; ++i) own[i] += values[first + i];
                   });
}

std::vector<float> read_all(GradientPartition& grads, int64_t begin, int64_t end) {
  core::StatusOr<const float*> read = grads.read(begin, end);
  REQUIRE(read.ok());
  return std::vector<float>(*read, *read + (end - begin));
}

TEST_CASE("a swapped gradient partition sums, scales and reads as one in memory does") {
  testing::TempDir dir;
  auto backend = kernels::make_cpu_backend(1);
  // Floats [1000, 6123) of the layout: pieces that start and end inside pages.
  const int64_t begin = 1000;
  const int64_t end = 6123;
  GradientPartition memory(*backend, begin, end);
  core::StatusOr<std::unique_ptr<PartitionSwap>> swap =
      PartitionSwap::create(dir.path(), begin, end, {}, 1024);
  REQUIRE(swap.ok());
  // Added 700 floats at a time: most buckets in several pieces.
  GradientPartition swapped(*backend, std::move(*swap), begin, 700);
  CHECK(swapped.swapped());
  CHECK(swapped.data() == nullptr);
  std::mt19937_64 engine(3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    for (GradientPartition* grads : {&memory, &swapped}) grads->begin_sum();
    // Two micro-batches, each adding every float once, in buckets of
    // uneven sizes reported back to front as a reducer does.
    for (int micro = 0; micro < 2; ++micro) {
      for (int64_t bucket_end = end; bucket_end > begin;) {
        const int64_t bucket_begin =
            std::max(begin, bucket_end - 1 - static_cast<int64_t>(engine() % 1500));
        std::vector<float> values(bucket_end - bucket_begin);
        for (float& v : values) v = value(engine);
        for (GradientPartition* grads : {&memory, &swapped}) {
          REQUIRE(add_values(*grads, bucket_begin, values).ok());
        }
        bucket_end = bucket_begin;
      }
      for (GradientPartition* grads : {&memory, &swapped}) grads->end_sum();
    }
    CHECK(read_all(swapped, begin, end) == read_all(memory, begin, end));
    const float factor = 0.37f;
    for (GradientPartition* grads : {&memory, &swapped}) grads->scale(factor);
    // Scaled as each range is read, float by float as in memory.
    CHECK(read_all(swapped, 2000, 2500) == read_all(memory, 2000, 2500));
    CHECK(read_all(swapped, begin, end) == read_all(memory, begin, end));
  }
  // A new sum starts from zero without reading the file.
  swapped.begin_sum();
  REQUIRE(add_values(swapped, begin, std::vector<float>(end - begin, 2.0f)).ok());
  swapped.end_sum();
  CHECK(read_all(swapped, begin, end) == std::vector<float>(end - begin, 2.0f));
  CHECK(swapped.memory_bytes() < (end - begin) * static_cast<int64_t>(sizeof(float)) * 3);
  CHECK(memory.memory_bytes() == (end - begin) * static_cast<int64_t>(sizeof(float)));
}

TEST_CASE("a float added twice in a step's first micro-batch keeps both, swapped or not") {
  // ZeRO stage 3's tied output layer: a range gets a part early, then the
  // bucket over it and its neighbours. The swap file holds the last step's
  // sums; only what this micro-batch added may be read back.
  testing::TempDir dir;
  auto backend = kernels::make_cpu_backend(1);
  const int64_t begin = 0, end = 5000;
  GradientPartition memory(*backend, begin, end);
  core::StatusOr<std::unique_ptr<PartitionSwap>> swap =
      PartitionSwap::create(dir.path(), begin, end, {}, 1024);
  REQUIRE(swap.ok());
  GradientPartition swapped(*backend, std::move(*swap), begin, 700);
  for (GradientPartition* grads : {&memory, &swapped}) {
    // A last step's sums, all 9.
    grads->begin_sum();
    REQUIRE(add_values(*grads, begin, std::vector<float>(end - begin, 9.0f)).ok());
    grads->end_sum();
    grads->begin_sum();
    // Parts over [1000, 1300) and [1300, 2100), then [3000, 3050).
    REQUIRE(add_values(*grads, 1000, std::vector<float>(300, 1.0f)).ok());
    REQUIRE(add_values(*grads, 1300, std::vector<float>(800, 2.0f)).ok());
    REQUIRE(add_values(*grads, 3000, std::vector<float>(50, 4.0f)).ok());
    // Then every float once.
    REQUIRE(add_values(*grads, begin, std::vector<float>(end - begin, 0.5f)).ok());
    grads->end_sum();
  }
  std::vector<float> expected(end - begin, 0.5f);
  for (int64_t i = 1000; i < 1300; ++i) expected[i] = 1.5f;
  for (int64_t i = 1300; i < 2100; ++i) expected[i] = 2.5f;
  for (int64_t i = 3000; i < 3050; ++i) expected[i] = 4.5f;
  CHECK(read_all(memory, begin, end) == expected);
  CHECK(read_all(swapped, begin, end) == expected);
}

}  // namespace
}  // namespace dslaunch::worker
