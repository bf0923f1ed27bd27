// The data group's gradient mean over device memory (DeviceGradientReducer)
// on the CUDA backend's kernels in guarded memory: through the host-staged
// communicator, and overlapped with backward through a stream-ordered one
// (NCCL's way) on the emulator's deferred streams. The same bits as
// GradientReducer's over host memory, in both modes and every
// communication type. Runs under mpirun (see mpi_test); every rank
// executes every test case.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "core/dtype.h"
#include "core/layout/device_optimizer_bytes.h"
#include "kernels/simt/emulated_backend.h"
#include "tests/worker/parallel/stream_ordered_communicator.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/host_staged_communicator.h"
#include "worker/parallel/device_gradient_reducer.h"
#include "worker/parallel/gradient_buckets.h"
#include "worker/parallel/gradient_reducer.h"
#include "worker/parallel/releasable_buffer.h"

namespace dslaunch::worker {
namespace {

using comm::testing::world_data;
using comm::testing::world_rank;

kernels::Backend& device() {
  static const std::unique_ptr<kernels::Backend> backend =
      kernels::simt::make_emulated_backend({}, kernels::simt::DeviceMemory::kGuarded);
  return *backend;
}

// Different on every rank and pass, not exact in 16 bits nor in their sums.
std::vector<float> gradients(int64_t n, int pass) {
  std::mt19937 random(1000 * world_rank() + pass);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> values(n);
  for (float& value : values) value = normal(random);
  return values;
}

// Each stream's work runs only when the host or another stream needs it.
kernels::Backend& deferred_device() {
  static const std::unique_ptr<kernels::Backend> backend = kernels::simt::make_emulated_backend(
      {}, kernels::simt::DeviceMemory::kGuarded, kernels::simt::StreamOrder::kDeferred);
  return *backend;
}

// Read on the default stream.
std::vector<float> to_host(const float* data, int64_t n, kernels::Backend& on = device()) {
  std::vector<float> host(n);
  on.copy_device_to_host(host.data(), data, n * static_cast<int64_t>(sizeof(float)));
  return host;
}

float* to_device(kernels::DeviceBuffer<float>& buffer, const std::vector<float>& host,
                 kernels::Backend& on = device()) {
  on.copy_host_to_device(buffer.data(), host.data(), buffer.bytes());
  return buffer.data();
}

// A communicator like NCCL's over the deferred device (collective).
std::unique_ptr<comm::testing::StreamOrderedCommunicator> stream_ordered() {
  core::StatusOr<std::unique_ptr<comm::Communicator>> host =
      world_data().duplicate("stream-ordered");
  REQUIRE(host.ok());
  return std::make_unique<comm::testing::StreamOrderedCommunicator>(std::move(*host),
                                                                   deferred_device());
}

// Backward's order (from the end), in ranges of 7 floats that cut buckets
// anywhere; `after` runs after each ready().
void report_backward(DeviceGradientReducer& reducer, int64_t n,
                     const std::function<void(int64_t begin)>& after = {}) {
  for (int64_t end = n; end > 0; end -= 7) {
    const int64_t begin = std::max<int64_t>(0, end - 7);
    reducer.ready(begin, end);
    if (after) after(begin);
  }
}

struct Case {
  int64_t n;
  int64_t bucket;
  core::DType wire;
};

// 10,007 floats in buckets of 1,000 cut shares at odd places; 20 floats
// leave the last ranks' partitions empty; one bucket of everything.
const Case kCases[] = {
    {10'007, 1'000, core::DType::kF32}, {10'007, 1'000, core::DType::kBF16},
    {10'007, 1'000, core::DType::kF16}, {20, 3, core::DType::kF32},
    {20, 3, core::DType::kBF16},        {4'099, int64_t{1} << 40, core::DType::kF16}};

// The host reducer's mean of pass 0's gradients.
std::vector<float> host_all_reduce(const Case& c) {
  std::vector<float> mean = gradients(c.n, 0);
  GradientReducer host(world_data(), mean.data(), c.n, c.bucket);
  host.set_communication_type(c.wire);
  host.ready(0, c.n);
  REQUIRE(host.finish().ok());
  return mean;
}

// This rank's partition of the host reducer's means, after each of two
// backward passes accumulated into it.
std::vector<std::vector<float>> host_partition_sums(const Case& c, const ZeroPartition& partition) {
  const int rank = world_data().rank();
  std::vector<float> sums(partition.end(rank) - partition.begin(rank), 0.0f);
  ReleasableBuffer workspace(c.n);
  GradientReducer host(world_data(), workspace, c.bucket, partition, sums.data());
  host.set_communication_type(c.wire);
  std::vector<std::vector<float>> after;
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<float> values = gradients(c.n, pass);
    std::copy(values.begin(), values.end(), workspace.data());
    host.ready(0, c.n);
    REQUIRE(host.finish().ok());
    after.push_back(sums);
  }
  return after;
}

TEST_CASE("the device's all-reduce equals the host reducer's bit for bit") {
  const auto staged = comm::make_host_staged_communicator(world_data(), device());
  for (const Case& c : kCases) {
    INFO("n " << c.n << ", bucket " << c.bucket << ", " << core::dtype_name(c.wire));
    const std::vector<float> expected = host_all_reduce(c);
    DeviceGradientReducer reducer(*staged, device(), c.n, c.bucket, c.wire);
    kernels::DeviceBuffer<float> grads(device(), c.n);
    REQUIRE(reducer.all_reduce(to_device(grads, gradients(c.n, 0))).ok());
    CHECK(to_host(grads.data(), c.n) == expected);
    // As the plan counts it.
    CHECK(reducer.buffer_bytes() ==
          core::device_state_bytes({.parameters = c.n,
                                    .ranks = world_data().size(),
                                    .bucket_elements = c.bucket,
                                    .narrow_wire = c.wire != core::DType::kF32})
              .communication_buffers);
  }
}

TEST_CASE("the device's reduce-scatter adds the host reducer's means to the partition") {
  const auto staged = comm::make_host_staged_communicator(world_data(), device());
  for (const Case& c : kCases) {
    INFO("n " << c.n << ", bucket " << c.bucket << ", " << core::dtype_name(c.wire));
    const ZeroPartition partition =
        make_zero_partition(c.n, world_data().size(), kZeroPartitionAlignment);
    const int rank = world_data().rank();
    const int64_t own = partition.end(rank) - partition.begin(rank);
    // Two backward passes accumulate into the partition.
    const std::vector<float> expected = host_partition_sums(c, partition).back();
    DeviceGradientReducer reducer(*staged, device(), c.n, c.bucket, c.wire);
    kernels::DeviceBuffer<float> grads(device(), c.n);
    kernels::DeviceBuffer<float> partition_grads(device(), std::max<int64_t>(own, 1));
    device().memset_zero(partition_grads.data(), partition_grads.bytes());
    std::vector<GradientBucket> consumed;
    reducer.scatter_into(
        {grads.data(), partition_grads.data(), [&consumed](int64_t begin, int64_t end) {
           consumed.push_back({begin, end});
         }});
    const std::vector<GradientBucket> buckets = gradient_buckets(c.n, c.bucket);
    for (int pass = 0; pass < 2; ++pass) {
      to_device(grads, gradients(c.n, pass));
      consumed.clear();
      // Backward's order (from the end), in ranges of 7 floats that cut
      // buckets anywhere: each bucket is consumed once complete, in order.
      for (int64_t end = c.n; end > 0; end -= 7) {
        const int64_t begin = std::max<int64_t>(0, end - 7);
        const size_t before = consumed.size();
        reducer.ready(begin, end);
        for (size_t k = before; k < consumed.size(); ++k) {
          CHECK(consumed[k].begin >= begin);
          CHECK(consumed[k].end == buckets[k].end);
        }
      }
      REQUIRE(reducer.finish().ok());
      REQUIRE(consumed.size() == buckets.size());
      for (size_t k = 0; k < buckets.size(); ++k) CHECK(consumed[k].begin == buckets[k].begin);
    }
    std::vector<float> got = to_host(partition_grads.data(), own);
    CHECK(got == expected);
  }
}

TEST_CASE("on a device stream the all-reduce runs behind backward, to the host reducer's bits") {
  kernels::Backend& on = deferred_device();
  const auto stream = stream_ordered();
  for (const Case& c : kCases) {
    INFO("n " << c.n << ", bucket " << c.bucket << ", " << core::dtype_name(c.wire));
    const std::vector<float> expected = host_all_reduce(c);
    DeviceGradientReducer reducer(*stream, on, c.n, c.bucket, c.wire);
    kernels::DeviceBuffer<float> grads(on, c.n);
    reducer.all_reduce_into(grads.data());
    // Backward's writes, queued on the default stream: the reducer's stream
    // must wait for them.
    to_device(grads, gradients(c.n, 0), on);
    const int64_t started = stream->started();
    report_backward(reducer, c.n);
    // Backward's thread was not held until the last bucket was reduced.
    CHECK(stream->ran() < stream->started());
    CHECK(stream->started() > started);
    REQUIRE(reducer.finish().ok());
    CHECK(stream->ran() == stream->started());
    // The default stream reads the means without waiting for the reducer's.
    CHECK(to_host(grads.data(), c.n, on) == expected);
  }
}

TEST_CASE("on a device stream each bucket is consumed once its mean is in the partition") {
  kernels::Backend& on = deferred_device();
  const auto stream = stream_ordered();
  for (const Case& c : kCases) {
    INFO("n " << c.n << ", bucket " << c.bucket << ", " << core::dtype_name(c.wire));
    const ZeroPartition partition =
        make_zero_partition(c.n, world_data().size(), kZeroPartitionAlignment);
    const int rank = world_data().rank();
    const int64_t own_begin = partition.begin(rank);
    const int64_t own = partition.end(rank) - own_begin;
    // The partition after each of two backward passes.
    const std::vector<std::vector<float>> expected = host_partition_sums(c, partition);
    DeviceGradientReducer reducer(*stream, on, c.n, c.bucket, c.wire);
    kernels::DeviceBuffer<float> grads(on, c.n);
    kernels::DeviceBuffer<float> partition_grads(on, std::max<int64_t>(own, 1));
    on.memset_zero(partition_grads.data(), partition_grads.bytes());
    const std::vector<GradientBucket> buckets = gradient_buckets(c.n, c.bucket);
    std::vector<GradientBucket> consumed;
    int pass = 0;
    reducer.scatter_into({grads.data(), partition_grads.data(), [&](int64_t begin, int64_t end) {
                            consumed.push_back({begin, end});
                            // Its share of this pass's means is there already.
                            const int64_t from = std::clamp(begin, own_begin, own_begin + own);
                            const int64_t to = std::clamp(end, own_begin, own_begin + own);
                            if (from == to) return;
                            const std::vector<float> got =
                                to_host(partition_grads.data() + (from - own_begin), to - from, on);
                            CHECK(got == std::vector<float>(
                                             expected[pass].begin() + (from - own_begin),
                                             expected[pass].begin() + (to - own_begin)));
                          }});
    for (pass = 0; pass < 2; ++pass) {
      to_device(grads, gradients(c.n, pass), on);
      consumed.clear();
      report_backward(reducer, c.n, [&](int64_t begin) {
        // Buckets complete so far, of which at most kBucketsInFlight wait.
        int64_t complete = 0;
        while (complete < static_cast<int64_t>(buckets.size()) &&
               buckets[complete].begin >= begin) {
          ++complete;
        }
        CHECK(complete - static_cast<int64_t>(consumed.size()) >= 0);
        CHECK(complete - static_cast<int64_t>(consumed.size()) <=
              DeviceGradientReducer::kBucketsInFlight);
      });
      REQUIRE(reducer.finish().ok());
      REQUIRE(consumed.size() == buckets.size());
      for (size_t k = 0; k < buckets.size(); ++k) CHECK(consumed[k].begin == buckets[k].begin);
    }
    CHECK(to_host(partition_grads.data(), own, on) == expected[1]);
  }
}

TEST_CASE("the device's reduce-scatter names what was reported wrong") {
  const auto staged = comm::make_host_staged_communicator(world_data(), device());
  const int64_t n = 200;
  const ZeroPartition partition = make_zero_partition(n, world_data().size(), 16);
  const int rank = world_data().rank();
  kernels::DeviceBuffer<float> grads(device(), n);
  kernels::DeviceBuffer<float> partition_grads(
      device(), std::max<int64_t>(1, partition.end(rank) - partition.begin(rank)));
  device().memset_zero(grads.data(), grads.bytes());
  DeviceGradientReducer reducer(*staged, device(), n, 64, core::DType::kF32);
  reducer.scatter_into({grads.data(), partition_grads.data(), {}});
  // Every rank makes the same calls, so the collectives stay matched.
  reducer.ready(150, 200);
  core::Status error = reducer.finish();
  CHECK(error.code() == core::StatusCode::kInvalidArgument);
  CHECK_THAT(error.message(), Catch::Contains("14 floats of bucket [136, 200)") &&
                                  Catch::Contains("never passed to ready()"));
  reducer.ready(0, 201);
  error = reducer.finish();
  CHECK_THAT(error.message(), Catch::Contains("ready [0, 201)") && Catch::Contains("[0, 200)"));
  reducer.ready(136, 200);
  reducer.ready(150, 160);
  error = reducer.finish();
  CHECK_THAT(error.message(), Catch::Contains("already reported"));
  // After a misuse the next micro-batch starts afresh.
  reducer.ready(0, 200);
  CHECK(reducer.finish().ok());
}

TEST_CASE("the host-staged communicator lands only the blocks it receives") {
  comm::Communicator& host = world_data();
  const auto staged = comm::make_host_staged_communicator(host, device());
  const int rank = host.rank();
  const int size = host.size();
  // Each rank gathers 2 floats (its rank, twice) into every third slot pair
  // of a buffer of 3 floats a rank whose third float is -1 on the device.
  kernels::DeviceBuffer<float> out(device(), 3 * size);
  std::vector<float> initial(3 * size, -1.0f);
  to_device(out, initial);
  comm::Blocks blocks;
  for (int r = 0; r < size; ++r) {
    blocks.counts.push_back(2);
    blocks.displacements.push_back(3 * r);
  }
  kernels::DeviceBuffer<float> in(device(), 2);
  to_device(in, {static_cast<float>(rank), static_cast<float>(rank)});
  REQUIRE(
      staged
          ->all_gather(comm::buffer_of(in.data(), 2), comm::buffer_of(out.data(), 3 * size), blocks)
          ->wait()
          .ok());
  std::vector<float> expected;
  for (int r = 0; r < size; ++r) expected.insert(expected.end(), {1.0f * r, 1.0f * r, -1.0f});
  CHECK(to_host(out.data(), 3 * size) == expected);

  // A reduce-scatter of one float a rank into a larger buffer lands that
  // float alone.
  kernels::DeviceBuffer<float> values(device(), size);
  std::vector<float> mine(size);
  for (int r = 0; r < size; ++r) mine[r] = static_cast<float>(10 * r + rank);
  to_device(values, mine);
  to_device(out, initial);
  const std::vector<int64_t> ones(size, 1);
  REQUIRE(staged
              ->reduce_scatter(comm::buffer_of(values.data(), size),
                               comm::buffer_of(out.data(), 3 * size), ones, comm::ReduceOp::kSum)
              ->wait()
              .ok());
  std::vector<float> scattered(3 * size, -1.0f);
  scattered[0] = static_cast<float>(10 * rank * size + size * (size - 1) / 2);
  CHECK(to_host(out.data(), 3 * size) == scattered);

  // An all-reduce and a broadcast on device memory, and a refused send.
  kernels::DeviceBuffer<float> value(device(), 1);
  to_device(value, {static_cast<float>(rank + 1)});
  REQUIRE(staged->all_reduce(comm::buffer_of(value.data(), 1), comm::ReduceOp::kSum)->wait().ok());
  CHECK(to_host(value.data(), 1)[0] == static_cast<float>(size * (size + 1) / 2));
  to_device(value, {static_cast<float>(rank == size - 1 ? 42 : 0)});
  REQUIRE(staged->broadcast(comm::buffer_of(value.data(), 1), size - 1)->wait().ok());
  CHECK(to_host(value.data(), 1)[0] == 42.0f);
  const core::Status send = staged->send(comm::buffer_of(value.data(), 1), 0)->wait();
  CHECK(send.code() == core::StatusCode::kFailedPrecondition);
  CHECK(staged->axis() == host.axis());
}

}  // namespace
}  // namespace dslaunch::worker
