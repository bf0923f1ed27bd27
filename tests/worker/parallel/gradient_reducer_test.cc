// Runs under mpirun (see mpi_test): every rank executes every test case.
#include "worker/parallel/gradient_reducer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/half_precision.h"

#include "core/status.h"
#include "tests/worker/parallel/reducer_testing.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/process_groups.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

using dslaunch::core::Status;
using dslaunch::core::StatusCode;
using dslaunch::worker::GradientReducer;
using dslaunch::worker::make_zero_partition;
using dslaunch::worker::ReleasableBuffer;
using dslaunch::worker::ZeroPartition;
namespace comm = dslaunch::worker::comm;
using namespace std::chrono_literals;

namespace {

using dslaunch::worker::testing::gradient;
using dslaunch::worker::testing::Ranges;
using dslaunch::worker::testing::world_rank;
using dslaunch::worker::testing::world_size;

// The data group of the whole world, shared by the test cases.
comm::Communicator& data_comm() { return comm::testing::world_groups().data(); }

// Groups of their own over the whole world (data axis), waiting at most
// `timeout` for a collective; collective over the world.
std::unique_ptr<comm::ProcessGroups> own_groups(std::chrono::milliseconds timeout) {
  comm::CommOptions options;
  options.wait.timeout = timeout;
  auto created = comm::create_mpi_process_groups({1, world_size(), 1}, options);
  INFO("status: " << created.status().message());
  REQUIRE(created.ok());
  return std::move(created.value());
}

// Fills in place: the reducer holds the buffer's address.
void fill_gradients(std::vector<float>& grads, int rank, int step) {
  for (std::size_t i = 0; i < grads.size(); ++i)
    grads[i] = gradient(rank, step, static_cast<int64_t>(i));
}

std::vector<float> rank_gradients(int rank, int step, int64_t n) {
  std::vector<float> grads(n);
  fill_gradients(grads, rank, step);
  return grads;
}

std::vector<float> mean_gradients(int size, int step, int64_t n) {
  std::vector<float> mean(n);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int r = 0; r < size; ++r) sum += gradient(r, step, i);
    mean[i] = static_cast<float>(sum / size);
  }
  return mean;
}

// Consecutive ranges covering [0, n) with sizes cycling through `sizes`,
// listed from the end of the buffer (as backward finishes them) or the start.
Ranges chunks(int64_t n, const std::vector<int64_t>& sizes, bool from_end) {
  Ranges ranges;
  std::size_t next = 0;
  if (from_end) {
    for (int64_t end = n; end > 0;) {
      const int64_t begin = std::max<int64_t>(0, end - sizes[next++ % sizes.size()]);
      ranges.emplace_back(begin, end);
      end = begin;
    }
  } else {
    for (int64_t begin = 0; begin < n;) {
      const int64_t end = std::min<int64_t>(n, begin + sizes[next++ % sizes.size()]);
      ranges.emplace_back(begin, end);
      begin = end;
    }
  }
  return ranges;
}

struct ReportOrder {
  const char* name;
  Ranges ranges;
};

std::vector<ReportOrder> report_orders(int64_t n, int rank) {
  Ranges shuffled = chunks(n, {13}, false);
  // A different order on every rank: the launch order must not depend on it.
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(1234 + rank));
  return {{"whole buffer at once", {{0, n}}},
          {"backward-like chunks from the end", chunks(n, {1, 5, 17, 2, 40}, true)},
          {"single floats from the end", chunks(n, {1}, true)},
          {"chunks from the start", chunks(n, {3, 11, 1, 29}, false)},
          {"chunks in a rank-dependent random order", shuffled}};
}

// Polls instead of sleeping a fixed time: returns as soon as `done` holds, or
// false after a generous deadline.
template <typename Predicate>
bool eventually(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("the buffer holds the exact mean over ranks for any bucket size and report order") {
  const int rank = world_rank();
  const int size = world_size();
  const int64_t n = 301;
  const std::vector<float> expected = mean_gradients(size, 0, n);

  for (int64_t bucket : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{64}, int64_t{150},
                         int64_t{300}, int64_t{301}, int64_t{302}, int64_t{1} << 40}) {
    for (const ReportOrder& order : report_orders(n, rank)) {
      INFO("bucket " << bucket << ", " << order.name);
      std::vector<float> grads = rank_gradients(rank, 0, n);
      GradientReducer reducer(data_comm(), grads.data(), n, bucket);
      CHECK(reducer.bucket_count() == (n + std::min(bucket, n) - 1) / std::min(bucket, n));
      for (const auto& [begin, end] : order.ranges) reducer.ready(begin, end);
      REQUIRE_OK(reducer.finish());
      CHECK(grads == expected);
    }
  }
}

TEST_CASE(
    "16-bit communication sums the rounded shares in fp32 and rounds the mean, in half the bytes") {
  const int rank = world_rank();
  const int size = world_size();
  const int64_t n = 3001;
  for (const dslaunch::core::DType type :
       {dslaunch::core::DType::kBF16, dslaunch::core::DType::kF16}) {
    INFO(dslaunch::core::dtype_name(type));
    const auto narrow = [type](float value) {
      return type == dslaunch::core::DType::kBF16
                 ? dslaunch::kernels::bf16_to_float(dslaunch::kernels::float_to_bf16(value))
                 : dslaunch::kernels::fp16_to_float(dslaunch::kernels::float_to_fp16(value));
    };
    // Values no 16-bit format holds: every rounding shows.
    const auto value = [](int r, int64_t i) {
      return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(r)) * 3.1f;
    };
    std::vector<float> expected(n);
    for (int64_t i = 0; i < n; ++i) {
      float sum = narrow(value(0, i));
      for (int r = 1; r < size; ++r) sum += narrow(value(r, i));
      expected[i] = narrow(sum / static_cast<float>(size));
    }
    for (const int64_t bucket : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{5000}}) {
      INFO("bucket " << bucket);
      std::vector<float> grads(n);
      for (int64_t i = 0; i < n; ++i) grads[i] = value(rank, i);
      auto& transport = comm::testing::world_groups().transport();
      GradientReducer reducer(data_comm(), grads.data(), n, bucket);
      reducer.set_communication_type(type);
      const int64_t before = transport.wire_bytes("data");
      for (const auto& [begin, end] : chunks(n, {1, 5, 17, 2, 40}, true)) reducer.ready(begin, end);
      REQUIRE_OK(reducer.finish());
      CHECK(grads == expected);
      // An all-to-all and an all-gather of 2-byte values: the bytes of a
      // ring all-reduce of fp32 halved (each bucket's all-to-all blocks are
      // its largest share, so tiny buckets pad a little).
      const int64_t bytes = transport.wire_bytes("data") - before;
      const int64_t fp32 = comm::wire_bytes(comm::OpKind::kAllReduce, 4 * n, size);
      if (bucket >= 1000) CHECK(bytes <= fp32 / 2 + 16 * size * ((n + bucket - 1) / bucket));
    }
  }
}

TEST_CASE("one reducer serves many steps") {
  const int rank = world_rank();
  const int size = world_size();
  const int64_t n = 1000;
  std::vector<float> grads(n);
  GradientReducer reducer(data_comm(), grads.data(), n, 96);
  CHECK(reducer.bucket_count() == 11);
  for (int step = 0; step < 4; ++step) {
    INFO("step " << step);
    fill_gradients(grads, rank, step);
    for (const auto& [begin, end] : chunks(n, {50 + step, 7}, true)) reducer.ready(begin, end);
    REQUIRE_OK(reducer.finish());
    CHECK(reducer.reduced_buckets() == 0);  // counts restart with the step
    CHECK(grads == mean_gradients(size, step, n));
  }
}

TEST_CASE("buckets are reduced during the step, in order from the end of the buffer") {
  const int rank = world_rank();
  const int size = world_size();
  const int64_t n = 1000;
  std::vector<float> grads = rank_gradients(rank, 0, n);
  GradientReducer reducer(data_comm(), grads.data(), n, 100);
  REQUIRE(reducer.bucket_count() == 10);

  // The front of the buffer is bucket 9, launched only after buckets 0..8.
  reducer.ready(0, 100);
  CHECK(reducer.reduced_buckets() == 0);
  // The last 100 floats are bucket 0: complete, so reduced without finish().
  reducer.ready(900, 1000);
  CHECK(eventually([&] { return reducer.reduced_buckets() == 1; }));
  // Half of bucket 1 is not enough to launch it.
  reducer.ready(850, 900);
  CHECK(reducer.reduced_buckets() == 1);
  reducer.ready(800, 850);
  reducer.ready(100, 800);
  CHECK(eventually([&] { return reducer.reduced_buckets() == 10; }));
  REQUIRE_OK(reducer.finish());
  CHECK(grads == mean_gradients(size, 0, n));
}

TEST_CASE("a communicator of one rank leaves the values unchanged") {
  const int rank = world_rank();
  const int64_t n = 500;
  std::vector<float> grads = rank_gradients(rank, 0, n);
  const std::vector<float> original = grads;
  GradientReducer reducer(comm::testing::solo_data_comm(), grads.data(), n, 64);
  CHECK(reducer.bucket_count() == 8);
  reducer.ready(436, 500);  // bucket 0 exactly
  CHECK(reducer.reduced_buckets() == 1);
  reducer.ready(0, 436);
  CHECK(reducer.reduced_buckets() == 8);
  CHECK(reducer.finish().ok());
  CHECK(grads == original);
}

TEST_CASE("an empty buffer needs no reports") {
  GradientReducer reducer(data_comm(), nullptr, 0, 10);
  CHECK(reducer.bucket_count() == 0);
  CHECK(reducer.finish().ok());
}

TEST_CASE("misreported ranges make finish fail and the next step still works") {
  const int rank = world_rank();
  const int size = world_size();
  const int64_t n = 200;
  std::vector<float> grads = rank_gradients(rank, 0, n);
  GradientReducer reducer(data_comm(), grads.data(), n, 64);

  SECTION("a range outside the buffer") {
    reducer.ready(150, 201);
    reducer.ready(0, n);
    const Status error = reducer.finish();
    CHECK(error.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(error.message(), Catch::Contains("ready [150, 201)") && Catch::Contains("[0, 200)"));
  }
  SECTION("a reversed range") {
    reducer.ready(10, 5);
    reducer.ready(0, n);
    const Status error = reducer.finish();
    CHECK(error.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(error.message(), Catch::Contains("ready [10, 5)"));
  }
  SECTION("a float reported twice") {
    reducer.ready(0, n);
    reducer.ready(199, 200);
    const Status error = reducer.finish();
    CHECK(error.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(error.message(),
               Catch::Contains("already reported") && Catch::Contains("[136, 200)"));
  }
  SECTION("floats never reported (the same on every rank, so no rank waits)") {
    reducer.ready(100, 200);
    const Status error = reducer.finish();
    CHECK_FALSE(error.ok());
    CHECK_THAT(error.message(),
               Catch::Contains("28 floats of bucket [72, 136) were never passed to ready()"));
  }
  fill_gradients(grads, rank, 1);
  reducer.ready(0, n);
  REQUIRE_OK(reducer.finish());
  CHECK(grads == mean_gradients(size, 1, n));
}

TEST_CASE("bad construction arguments are reported by finish") {
  std::vector<float> grads(10);
  GradientReducer reducer(data_comm(), grads.data(), 10, 0);
  reducer.ready(0, 10);
  const Status error = reducer.finish();
  CHECK(error.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(error.message(), Catch::Contains("bucket size >= 1 (got n 10, bucket size 0)"));
}

// The world communicator still works after reducers were destroyed: their
// traffic was on duplicates of their own, none left half-done.
namespace {
void check_world_still_works() {
  int32_t total = 1;
  REQUIRE_OK(comm::testing::world_groups()
                 .world()
                 .all_reduce(comm::buffer_of(&total, 1), comm::ReduceOp::kSum)
                 ->wait());
  CHECK(total == world_size());
}
}  // namespace

TEST_CASE("destroying a reducer in the middle of a step does not hang") {
  const int rank = world_rank();
  const int64_t n = 1000;
  std::vector<float> grads = rank_gradients(rank, 0, n);
  {
    GradientReducer reducer(data_comm(), grads.data(), n, 10);
    reducer.ready(500, 1000);  // 50 buckets launched, the other 50 never will be
    // Destroyed once all launched buckets are reduced; the next case
    // destroys reducers while they still are.
    REQUIRE(eventually([&] { return reducer.reduced_buckets() == 50; }));
  }
  check_world_still_works();
}

// Each rank's reducer thread sees the destructor's stop at its own moment;
// launched buckets are still reduced, or one rank could start a bucket's
// collective that a peer never starts and wait in it forever (this hung
// within a few hundred rounds at 4 ranks before they were).
TEST_CASE("destroying reducers while launched buckets are reduced does not hang") {
  const int rank = world_rank();
  const int64_t n = 1000;
  std::vector<float> grads = rank_gradients(rank, 0, n);
  for (int round = 0; round < 200; ++round) {
    GradientReducer reducer(data_comm(), grads.data(), n, 10);
    reducer.ready(500, 1000);  // 50 buckets launched, none waited for
  }
  check_world_still_works();
}

TEST_CASE("a peer that never joins in time makes finish return kDeadlineExceeded") {
  const int rank = world_rank();
  const int size = world_size();
  // Rank 0 waits 300 ms for a collective; the others long enough never to
  // time out (each joins a collective rank 0 has already started, so theirs
  // complete at once). Reduce-scatter mode with one bucket: one collective
  // per step.
  std::unique_ptr<comm::ProcessGroups> groups = own_groups(rank == 0 ? 300ms : 60s);
  const int64_t n = 64;
  const ZeroPartition partition = make_zero_partition(n, size, 16);
  const int64_t own_begin = partition.begin(rank);
  const int64_t own_end = partition.end(rank);
  std::vector<float> partition_grads(own_end - own_begin, 0.0f);
  ReleasableBuffer workspace(n);
  REQUIRE(workspace.status().ok());
  for (int64_t i = 0; i < n; ++i) workspace.data()[i] = gradient(rank, 0, i);

  Status finished;
  Status barrier;
  {
    GradientReducer reducer(groups->data(), workspace, n, partition, partition_grads.data());
    REQUIRE(reducer.bucket_count() == 1);
    // Rank 0 reports every gradient at once; the others 1.5 s later, long
    // after rank 0's deadline.
    if (rank != 0) std::this_thread::sleep_for(1500ms);
    reducer.ready(0, n);
    finished = reducer.finish();
    // Rank 0's reduce-scatter stays in flight after its deadline and writes
    // into the reducer's buffers once the others join, so the reducer is
    // destroyed only after they did (destroying its duplicate communicator
    // waits for that call to return). The others enter this barrier after
    // their reduce-scatter completed, i.e. after they joined rank 0's.
    barrier = groups->world().barrier()->wait(60s);
  }
  {
    INFO("barrier: " << barrier.message());
    CHECK(barrier.ok());
  }
  INFO("finish: " << finished.message());
  if (rank == 0) {
    CHECK(finished.code() == StatusCode::kDeadlineExceeded);
    CHECK_THAT(finished.message(),
               Catch::Contains("reduce_scatter") && Catch::Contains("data/gradients"));
  } else {
    REQUIRE(finished.ok());
  }
  // The operations queued behind the late reduce-scatter on its stream (the
  // mean added to the partition) ran once it completed, before the
  // reducer's communicator was freed: on rank 0 too, the partition holds the
  // mean (the worker never gets here: a deadline ends it as hung).
  std::vector<float> expected;
  for (int64_t i = own_begin; i < own_end; ++i) {
    double sum = 0;
    for (int r = 0; r < size; ++r) sum += gradient(r, 0, i);
    expected.push_back(static_cast<float>(sum / size));
  }
  CHECK(partition_grads == expected);
}
