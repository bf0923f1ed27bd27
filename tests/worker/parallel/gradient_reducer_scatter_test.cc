// The gradient reducer's reduce-scatter mode (ZeRO stage 2). Runs under
// mpirun (see mpi_test): every rank executes every test case.
#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/status.h"
#include "tests/worker/parallel/reducer_testing.h"
#include "tests/worker/parallel/test_groups.h"

#include "worker/parallel/gradient_reducer.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

using dslaunch::core::Status;
using dslaunch::core::StatusCode;
using dslaunch::worker::GradientReducer;
using dslaunch::worker::make_zero_partition;
using dslaunch::worker::ReleasableBuffer;
using dslaunch::worker::ZeroPartition;

namespace {

using dslaunch::worker::testing::gradient;
using dslaunch::worker::testing::Ranges;
using dslaunch::worker::testing::world_rank;
using dslaunch::worker::testing::world_size;

// The data group of the whole world.
dslaunch::worker::comm::Communicator& data_comm() {
  return dslaunch::worker::comm::testing::world_groups().data();
}

void fill(ReleasableBuffer& workspace, int rank, int pass) {
  for (int64_t i = 0; i < workspace.size(); ++i) workspace.data()[i] = gradient(rank, pass, i);
}

// The mean over ranks of floats [begin, end), summed over passes 0..passes-1.
std::vector<float> expected_partition(int size, int passes, int64_t begin, int64_t end) {
  std::vector<float> expected;
  for (int64_t i = begin; i < end; ++i) {
    double total = 0;
    for (int pass = 0; pass < passes; ++pass) {
      double sum = 0;
      for (int r = 0; r < size; ++r) sum += gradient(r, pass, i);
      total += sum / size;
    }
    expected.push_back(static_cast<float>(total));
  }
  return expected;
}

Ranges from_end(int64_t n, int64_t chunk) {
  Ranges ranges;
  for (int64_t end = n; end > 0; end -= chunk)
    ranges.emplace_back(std::max<int64_t>(0, end - chunk), end);
  return ranges;
}

bool all_zero(ReleasableBuffer& workspace) {
  return std::all_of(workspace.data(), workspace.data() + workspace.capacity(),
                     [](float x) { return x == 0.0f; });
}

}  // namespace

TEST_CASE("each rank holds the exact mean of its partition, summed over backward passes") {
  const int rank = world_rank();
  const int size = world_size();
  // 20 floats at alignment 16 leave the last ranks' partitions empty; 1001
  // at alignment 1 cuts partitions at odd places, straddled by most buckets.
  for (const auto& [n, alignment] : {std::pair<int64_t, int64_t>{1001, 1}, {1001, 16}, {20, 16}}) {
    const ZeroPartition partition = make_zero_partition(n, size, alignment);
    const int64_t own = partition.end(rank) - partition.begin(rank);
    for (int64_t bucket : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{64}, int64_t{333},
                           int64_t{1001}, int64_t{1} << 40}) {
      INFO("n " << n << ", alignment " << alignment << ", bucket " << bucket);
      ReleasableBuffer workspace(n);
      REQUIRE(workspace.status().ok());
      std::vector<float> partition_grads(std::max<int64_t>(own, 0), 0.0f);
      GradientReducer reducer(data_comm(), workspace, bucket, partition, partition_grads.data());
      for (int pass = 0; pass < 2; ++pass) {
        fill(workspace, rank, pass);
        Ranges ranges = from_end(n, 5 + pass);
        // A different report order on every rank on the second pass: the
        // collectives must still match.
        if (pass == 1) std::shuffle(ranges.begin(), ranges.end(), std::mt19937(99 + rank));
        for (const auto& [begin, end] : ranges) reducer.ready(begin, end);
        REQUIRE_OK(reducer.finish());
        CHECK(all_zero(workspace));
        CHECK(partition_grads ==
              expected_partition(size, pass + 1, partition.begin(rank), partition.end(rank)));
      }
    }
  }
}

TEST_CASE("a reduced bucket's pages go back to the OS, partial pages included") {
  const int rank = world_rank();
  const int size = world_size();
  const int64_t n = 300'001;  // not a whole number of pages
  const ZeroPartition partition = make_zero_partition(n, size, 16);
  std::vector<float> partition_grads(partition.end(rank) - partition.begin(rank), 0.0f);
  ReleasableBuffer workspace(n);
  REQUIRE(workspace.status().ok());
  CHECK(workspace.resident_bytes() == 0);
  // Buckets that start and end inside pages.
  GradientReducer reducer(data_comm(), workspace, 10'007, partition, partition_grads.data());
  fill(workspace, rank, 0);
  const int64_t mapped = workspace.capacity() * static_cast<int64_t>(sizeof(float));
  CHECK(workspace.resident_bytes() == mapped);
  reducer.ready(0, n);
  REQUIRE_OK(reducer.finish());
  CHECK(workspace.resident_bytes() == 0);
  CHECK(workspace.peak_resident_bytes() == mapped);
  CHECK(partition_grads == expected_partition(size, 1, partition.begin(rank), partition.end(rank)));
  // Counted: the temporary for this rank's share of a bucket (a whole
  // bucket here, partitions being larger), the bucket table, the queue of
  // the step's 30 buckets and the counts.
  const int64_t temporary = 10'007 * static_cast<int64_t>(sizeof(float));
  CHECK(reducer.buffer_bytes() >= temporary);
  CHECK(reducer.buffer_bytes() < temporary + 3072);
}

TEST_CASE("on one rank the partition is the whole mean and the workspace is cleared") {
  const int64_t n = 777;
  const ZeroPartition partition = make_zero_partition(n, 1, 16);
  std::vector<float> partition_grads(n, 0.0f);
  ReleasableBuffer workspace(n);
  GradientReducer reducer(dslaunch::worker::comm::testing::solo_data_comm(), workspace, 100,
                          partition, partition_grads.data());
  fill(workspace, world_rank(), 0);
  reducer.ready(677, 777);  // bucket 0: moved into the partition at once
  CHECK(reducer.reduced_buckets() == 1);
  CHECK(workspace.data()[700] == 0.0f);
  reducer.ready(0, 677);
  REQUIRE_OK(reducer.finish());
  CHECK(all_zero(workspace));
  std::vector<float> expected;
  for (int64_t i = 0; i < n; ++i) expected.push_back(gradient(world_rank(), 0, i));
  CHECK(partition_grads == expected);
}

TEST_CASE("a partition that cannot be added to fails finish(), on one rank and on several") {
  const int64_t n = 777;
  const ZeroPartition partition = make_zero_partition(n, world_size(), 16);
  ReleasableBuffer workspace(n);
  std::vector<float> partition_grads(n, 0.0f);
  int adds = 0;
  // The second bucket's add fails, as a swapped partition's full drive would.
  GradientReducer reducer(
      data_comm(), workspace, 100, partition,
      [&](int64_t begin, int64_t end, const GradientReducer::AddToShare& add) {
        if (++adds == 2) return Status(StatusCode::kIoError, "writing the swapped gradients");
        add(partition_grads.data() + begin, 0, end - begin);
        return Status();
      });
  fill(workspace, world_rank(), 0);
  reducer.ready(0, n);
  const Status error = reducer.finish();
  CHECK(error.code() == StatusCode::kIoError);
  CHECK_THAT(error.message(), Catch::Contains("writing the swapped gradients"));
}

TEST_CASE("a partition that does not fit the workspace or the communicator is refused") {
  ReleasableBuffer workspace(100);
  std::vector<float> partition_grads(100);
  SECTION("wrong size") {
    GradientReducer reducer(data_comm(), workspace, 10, make_zero_partition(99, world_size(), 1),
                            partition_grads.data());
    const Status error = reducer.finish();
    CHECK(error.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(error.message(), Catch::Contains("does not cover the workspace (100 floats)"));
  }
  SECTION("wrong number of ranks") {
    GradientReducer reducer(data_comm(), workspace, 10,
                            make_zero_partition(100, world_size() + 1, 1), partition_grads.data());
    const Status error = reducer.finish();
    CHECK(error.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(error.message(), Catch::Contains("over the communicator's"));
  }
}

TEST_CASE("zeroing a range keeps the floats around it") {
  ReleasableBuffer workspace(5000);
  std::fill(workspace.data(), workspace.data() + workspace.size(), 1.0f);
  workspace.zero(100, 4500);  // a partial page, a whole one, a partial one
  for (int64_t i : {int64_t{0}, int64_t{99}, int64_t{4500}, int64_t{4999}}) {
    CHECK(workspace.data()[i] == 1.0f);
  }
  CHECK(std::all_of(workspace.data() + 100, workspace.data() + 4500,
                    [](float x) { return x == 0.0f; }));
  CHECK(workspace.capacity() % 1024 == 0);
  CHECK(workspace.page_end(4097) == std::min<int64_t>(workspace.capacity(), 8192));
}

TEST_CASE("parts reduced ahead of the buckets add up with the rest of their floats' gradient") {
  // As ZeRO stage 3's tied output layer: the first 300 floats get a part
  // (pass 0's values) reduced early, in chunks, then the rest of their
  // gradient (pass 1's) with everything else through the buckets.
  const int rank = world_rank();
  const int size = world_size();
  const int64_t n = 1001, parted = 300;
  for (const int64_t alignment : {int64_t{1}, int64_t{16}}) {
    for (const int64_t bucket : {int64_t{7}, int64_t{64}, int64_t{1001}}) {
      INFO("alignment " << alignment << ", bucket " << bucket);
      const ZeroPartition partition = make_zero_partition(n, size, alignment);
      ReleasableBuffer workspace(n);
      std::vector<float> partition_grads(partition.end(rank) - partition.begin(rank), 0.0f);
      GradientReducer reducer(data_comm(), workspace, bucket, partition, partition_grads.data());
      for (int step = 0; step < 2; ++step) {
        std::fill(partition_grads.begin(), partition_grads.end(), 0.0f);
        fill(workspace, rank, 0);
        for (int64_t begin = 0; begin < parted; begin += 110) {
          reducer.ready_part(begin, std::min(parted, begin + 110));
        }
        reducer.wait_parts();
        CHECK(std::all_of(workspace.data(), workspace.data() + parted,
                          [](float x) { return x == 0.0f; }));
        // The parts' neighbours are left alone.
        CHECK(workspace.data()[parted] == gradient(rank, 0, parted));
        for (int64_t i = 0; i < parted; ++i) workspace.data()[i] = gradient(rank, 1, i);
        for (const auto& [begin, end] : from_end(n, 50)) reducer.ready(begin, end);
        REQUIRE_OK(reducer.finish());
        CHECK(all_zero(workspace));
        std::vector<float> expected;
        for (int64_t i = partition.begin(rank); i < partition.end(rank); ++i) {
          expected.push_back(i < parted ? expected_partition(size, 2, i, i + 1)[0]
                                        : expected_partition(size, 1, i, i + 1)[0]);
        }
        CHECK(partition_grads == expected);
      }
    }
  }
}

TEST_CASE("a part in all-reduce mode is a misuse that fails finish()") {
  std::vector<float> grads(100, 1.0f);
  GradientReducer reducer(data_comm(), grads.data(), 100, 10);
  reducer.ready_part(0, 10);
  reducer.ready(0, 100);
  const Status error = reducer.finish();
  CHECK(error.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(error.message(), Catch::Contains("all-reduce mode"));
}
