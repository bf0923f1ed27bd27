#include "kernels/simt/emulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/simt/host_device.h"

namespace dslaunch::kernels::simt {
namespace {

using Catch::Matchers::Contains;

// Kernel bodies as the CUDA kernels write them: templates over the Thread.

// The classic shared-memory tree reduction of a block's values into
// block_sums[block]. last_stride is 1 in the correct kernel (s > 0); 2 is the
// off-by-one s > 1. sync_in_loop false drops the __syncthreads in the loop.
struct TreeVariant {
  int last_stride = 1;
  bool sync_in_loop = true;
};

template <class Thread>
DSL_HOST_DEVICE void tree_block_sum(Thread& thread, const float* in, float* block_sums,
                                    TreeVariant variant) {
  float* partial = thread.template shared_memory<float>();  // (block)
  const int t = thread.thread_index();
  partial[t] = in[thread.block_index() * thread.block_size() + t];
  thread.sync_threads();
  for (int s = thread.block_size() / 2; s >= variant.last_stride; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    if (variant.sync_in_loop) thread.sync_threads();
  }
  if (t == 0) block_sums[thread.block_index()] = partial[0];
}

// The butterfly: every lane ends with the sum of the warp's values.
template <class Thread, class T>
DSL_HOST_DEVICE T warp_sum(Thread& thread, T value) {
  for (int mask = Thread::kWarpSize / 2; mask > 0; mask >>= 1) {
    value += thread.shfl_xor(value, mask);
  }
  return value;
}

// Warp sums into shared memory, then the first warp sums those.
template <class Thread, class T>
DSL_HOST_DEVICE void warp_block_sum(Thread& thread, const T* in, T* block_sums) {
  T* warp_sums = thread.template shared_memory<T>();  // (block / 32)
  const T sum =
      warp_sum(thread, in[thread.block_index() * thread.block_size() + thread.thread_index()]);
  if (thread.lane() == 0) warp_sums[thread.warp()] = sum;
  thread.sync_threads();
  if (thread.warp() != 0) return;
  const int warps = thread.block_size() / Thread::kWarpSize;
  const T total = warp_sum(thread, thread.lane() < warps ? warp_sums[thread.lane()] : T(0));
  if (thread.lane() == 0) block_sums[thread.block_index()] = total;
}

// Small positive integers, so that every float sum is exact and a sum with
// terms missing differs.
template <class T>
std::vector<T> block_values(int count) {
  std::vector<T> values(count);
  for (int i = 0; i < count; ++i) values[i] = static_cast<T>(1 + (i * 7) % 5);
  return values;
}

template <class T>
std::vector<T> expected_block_sums(const std::vector<T>& values, int block) {
  std::vector<T> sums(values.size() / block, T(0));
  for (size_t i = 0; i < values.size(); ++i) sums[i / block] += values[i];
  return sums;
}

constexpr int kGrid = 3;
constexpr int kBlock = 256;

std::vector<float> run_tree_block_sum(const Schedule& schedule, TreeVariant variant) {
  const std::vector<float> in = block_values<float>(kGrid * kBlock);
  std::vector<float> block_sums(kGrid, -1.0f);
  emulate_launch(LaunchShape{kGrid, kBlock, kBlock * sizeof(float)}, schedule,
                 [&](EmulatedThread& thread) {
                   tree_block_sum(thread, in.data(), block_sums.data(), variant);
                 });
  return block_sums;
}

template <class T>
std::vector<T> run_warp_block_sum(const Schedule& schedule) {
  const std::vector<T> in = block_values<T>(kGrid * kBlock);
  std::vector<T> block_sums(kGrid, T(-1));
  emulate_launch(
      LaunchShape{kGrid, kBlock, kBlock / 32 * sizeof(T)}, schedule,
      [&](EmulatedThread& thread) { warp_block_sum(thread, in.data(), block_sums.data()); });
  return block_sums;
}

// The message of the KernelFault a launch throws; fails the test if none.
template <class Body>
std::string kernel_fault_of(const LaunchShape& shape, Body&& body) {
  try {
    emulate_launch(shape, Schedule{}, body);
  } catch (const KernelFault& fault) {
    return fault.what();
  }
  FAIL("the launch threw no KernelFault");
  return "";
}

struct Visit {
  int count = 0;
  int block_index = -1;
  int thread_index = -1;
  int block_size = -1;
  int grid_size = -1;
  int lane = -1;
  int warp = -1;
};

TEST_CASE("every thread of every block runs once with its indices") {
  for (int block : {1, 32, 96, 256, 1024}) {
    for (const Schedule& schedule : standard_schedules()) {
      INFO("block size " << block << ", " << describe(schedule));
      std::vector<Visit> visits(kGrid * block);
      emulate_launch(LaunchShape{kGrid, block}, schedule, [&](EmulatedThread& thread) {
        Visit& visit =
            visits.at(thread.block_index() * thread.block_size() + thread.thread_index());
        ++visit.count;
        visit.block_index = thread.block_index();
        visit.thread_index = thread.thread_index();
        visit.block_size = thread.block_size();
        visit.grid_size = thread.grid_size();
        visit.lane = thread.lane();
        visit.warp = thread.warp();
      });
      for (int i = 0; i < kGrid * block; ++i) {
        const Visit& visit = visits[i];
        REQUIRE(visit.count == 1);
        REQUIRE(visit.block_index == i / block);
        REQUIRE(visit.thread_index == i % block);
        REQUIRE(visit.block_size == block);
        REQUIRE(visit.grid_size == kGrid);
        REQUIRE(visit.lane == i % block % 32);
        REQUIRE(visit.warp == i % block / 32);
      }
    }
  }
}

TEST_CASE("a shared-memory tree reduction gives exact block sums under every schedule") {
  const std::vector<float> expected =
      expected_block_sums(block_values<float>(kGrid * kBlock), kBlock);
  for (const Schedule& schedule : standard_schedules()) {
    INFO(describe(schedule));
    CHECK(run_tree_block_sum(schedule, TreeVariant{}) == expected);
  }
}

TEST_CASE("the emulator exposes an off-by-one in the tree reduction's loop") {
  const std::vector<float> expected =
      expected_block_sums(block_values<float>(kGrid * kBlock), kBlock);
  for (const Schedule& schedule : standard_schedules()) {
    INFO(describe(schedule));
    CHECK(run_tree_block_sum(schedule, TreeVariant{.last_stride = 2}) != expected);
  }
}

TEST_CASE("the emulator exposes a missing __syncthreads in the tree reduction's loop") {
  const std::vector<float> expected =
      expected_block_sums(block_values<float>(kGrid * kBlock), kBlock);
  const TreeVariant unsynchronised{.sync_in_loop = false};
  // Thread t reads partial[t + s] while thread t + s may not have added into
  // it yet: running the low threads first shows it. (Running the high
  // threads first happens to give the right sum.)
  CHECK(run_tree_block_sum(Schedule{Schedule::Order::kForward}, unsynchronised) != expected);
  CHECK(run_tree_block_sum(Schedule{Schedule::Order::kShuffled, 1}, unsynchronised) != expected);
}

TEST_CASE("shfl_xor gives each lane the value of lane ^ mask") {
  for (int mask = 0; mask < 32; ++mask) {
    std::vector<double> received(64, -1.0);
    emulate_launch(
        LaunchShape{1, 64}, Schedule{Schedule::Order::kReverse}, [&](EmulatedThread& thread) {
          received[thread.thread_index()] = thread.shfl_xor(100.0 * thread.thread_index(), mask);
        });
    for (int t = 0; t < 64; ++t) {
      INFO("mask " << mask << ", thread " << t);
      REQUIRE(received[t] == 100.0 * ((t & ~31) | ((t % 32) ^ mask)));
    }
  }
}

TEST_CASE("a warp butterfly leaves the warp's sum in every lane") {
  const std::vector<float> in = block_values<float>(kBlock);
  const std::vector<float> expected = expected_block_sums(in, 32);
  for (const Schedule& schedule : standard_schedules()) {
    INFO(describe(schedule));
    std::vector<float> lane_sums(kBlock, -1.0f);
    emulate_launch(LaunchShape{1, kBlock}, schedule, [&](EmulatedThread& thread) {
      lane_sums[thread.thread_index()] = warp_sum(thread, in[thread.thread_index()]);
    });
    for (int t = 0; t < kBlock; ++t) REQUIRE(lane_sums[t] == expected[t / 32]);
  }
}

TEST_CASE("a block reduction through warp sums gives exact block sums") {
  for (const Schedule& schedule : standard_schedules()) {
    INFO(describe(schedule));
    CHECK(run_warp_block_sum<float>(schedule) ==
          expected_block_sums(block_values<float>(kGrid * kBlock), kBlock));
    CHECK(run_warp_block_sum<double>(schedule) ==
          expected_block_sums(block_values<double>(kGrid * kBlock), kBlock));
  }
}

TEST_CASE("a __syncthreads that some threads return before is a fault") {
  const std::string fault = kernel_fault_of(LaunchShape{2, 64}, [](EmulatedThread& thread) {
    if (thread.thread_index() >= 32) return;
    thread.sync_threads();
  });
  CHECK_THAT(fault, Contains("thread 32 of block 0 returned while thread 0 waits at sync_threads"));
}

TEST_CASE("a full-mask shuffle in a partial warp is a fault") {
  const std::string fault =
      kernel_fault_of(LaunchShape{1, 40}, [](EmulatedThread& thread) { thread.shfl_xor(1.0f, 1); });
  CHECK_THAT(fault, Contains("warp 1, which has 8 of 32 lanes"));
}

TEST_CASE("the full warp of a block with a partial warp may shuffle") {
  std::vector<float> sums(40, -1.0f);
  emulate_launch(LaunchShape{1, 40}, Schedule{}, [&](EmulatedThread& thread) {
    if (thread.warp() == 0) sums[thread.thread_index()] = warp_sum(thread, 1.0f);
  });
  for (int t = 0; t < 32; ++t) REQUIRE(sums[t] == 32.0f);
}

TEST_CASE("a lane that returns while its warp-mates shuffle is a fault") {
  const std::string fault = kernel_fault_of(LaunchShape{1, 64}, [](EmulatedThread& thread) {
    if (thread.thread_index() == 35) return;
    thread.shfl_xor(1.0f, 1);
  });
  CHECK_THAT(fault, Contains("thread 35 of block 0 returned while thread 32 of its warp waits at "
                             "shfl_xor"));
}

TEST_CASE("lanes of a warp at different barriers are a fault") {
  const std::string fault = kernel_fault_of(LaunchShape{1, 32}, [](EmulatedThread& thread) {
    if (thread.lane() < 16) {
      thread.sync_threads();
    } else {
      thread.shfl_xor(1.0, 1);
    }
  });
  CHECK_THAT(fault, Contains("thread 16 of block 0 waits at shfl_xor while thread 0 of its warp "
                             "waits at sync_threads"));
}

TEST_CASE("a shuffle lane mask outside [0, 32) is a fault") {
  const std::string fault = kernel_fault_of(
      LaunchShape{1, 32}, [](EmulatedThread& thread) { thread.shfl_xor(1.0f, 32); });
  CHECK_THAT(fault, Contains("lane mask 32"));
}

TEST_CASE("a write past either end of shared memory is a fault") {
  constexpr int64_t kBytes = 64;
  CHECK_THAT(kernel_fault_of(LaunchShape{2, 1, kBytes},
                             [](EmulatedThread& thread) {
                               if (thread.block_index() == 1) {
                                 thread.shared_memory<float>()[kBytes / sizeof(float)] = 0.0f;
                               }
                             }),
             Contains("wrote past the end of its 64 bytes of shared memory, at byte offset 64 "
                      "(block 1)"));
  CHECK_THAT(kernel_fault_of(
                 LaunchShape{1, 1, kBytes},
                 [](EmulatedThread& thread) { thread.shared_memory<unsigned char>()[-1] = 0; }),
             Contains("wrote before the start"));
}

TEST_CASE("shared memory is fresh and aligned in every block, and reads NaN where unwritten") {
  std::vector<float> seen(2 * 8, -1.0f);
  std::vector<double> unwritten_double(2, -1.0);
  std::vector<uintptr_t> addresses(2);
  emulate_launch(LaunchShape{2, 8, 8 * sizeof(double)}, Schedule{}, [&](EmulatedThread& thread) {
    const int t = thread.thread_index();
    const int b = thread.block_index();
    if (t == 0) {
      unwritten_double[b] = thread.shared_memory<double>()[7];
      addresses[b] = reinterpret_cast<uintptr_t>(thread.shared_memory<float>());
    }
    thread.sync_threads();
    float* slots = thread.shared_memory<float>();
    if (t % 2 == 0) slots[t] = 1.0f;
    thread.sync_threads();
    seen[b * 8 + t] = slots[t ^ 1];
  });
  for (int i = 0; i < 2 * 8; ++i) {
    INFO("block " << i / 8 << ", thread " << i % 8);
    if (i % 2 == 0) {
      CHECK(std::isnan(seen[i]));
    } else {
      CHECK(seen[i] == 1.0f);
    }
  }
  CHECK(std::isnan(unwritten_double[0]));
  CHECK(std::isnan(unwritten_double[1]));
  CHECK(addresses[0] % 16 == 0);
}

TEST_CASE("shapes CUDA refuses are invalid arguments") {
  const auto launch = [](LaunchShape shape) {
    emulate_launch(shape, Schedule{}, [](EmulatedThread&) {});
  };
  CHECK_THROWS_AS(launch({0, 32}), std::invalid_argument);
  CHECK_THROWS_AS(launch({1, 0}), std::invalid_argument);
  CHECK_THROWS_WITH(launch({1, 1025}), Contains("block size 1025") && Contains("1024"));
  CHECK_THROWS_AS(launch({1, 32, -1}), std::invalid_argument);
  CHECK_THROWS_WITH(launch({1, 32, 48 * 1024 + 1}), Contains("49153") && Contains("49152"));
  CHECK_NOTHROW(launch({1, 1024, 48 * 1024}));
}

// Counts the objects alive on the threads' stacks.
struct StackObject {
  explicit StackObject(int& alive) : alive(alive) { ++alive; }
  ~StackObject() { --alive; }
  int& alive;
};

TEST_CASE("an exception from one thread leaves the launch after the others unwind") {
  int alive = 0;
  CHECK_THROWS_AS(emulate_launch(LaunchShape{3, 64}, Schedule{},
                                 [&](EmulatedThread& thread) {
                                   const StackObject object(alive);
                                   thread.sync_threads();
                                   if (thread.block_index() == 1 && thread.thread_index() == 5) {
                                     throw std::out_of_range("thread 5 of block 1");
                                   }
                                   thread.sync_threads();
                                 }),
                  std::out_of_range);
  CHECK(alive == 0);

  int runs = 0;
  emulate_launch(LaunchShape{3, 64}, Schedule{}, [&](EmulatedThread& thread) {
    thread.sync_threads();
    ++runs;
  });
  CHECK(runs == 3 * 64);
}

// The thread indices in the order they ran, two phases of the given block.
std::vector<int> run_order(const Schedule& schedule, int block) {
  std::vector<int> order;
  emulate_launch(LaunchShape{1, block}, schedule, [&](EmulatedThread& thread) {
    order.push_back(thread.thread_index());
    thread.sync_threads();
    order.push_back(thread.thread_index());
  });
  return order;
}

TEST_CASE("the reverse schedule runs each phase's threads and the blocks in reverse") {
  CHECK(run_order(Schedule{Schedule::Order::kReverse}, 4) ==
        std::vector<int>{3, 2, 1, 0, 3, 2, 1, 0});
  CHECK(run_order(Schedule{Schedule::Order::kForward}, 4) ==
        std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3});

  std::vector<int> blocks;
  emulate_launch(LaunchShape{4, 1}, Schedule{Schedule::Order::kReverse},
                 [&](EmulatedThread& thread) { blocks.push_back(thread.block_index()); });
  CHECK(blocks == std::vector<int>{3, 2, 1, 0});
}

TEST_CASE("a shuffled schedule repeats with its seed and draws each phase anew") {
  constexpr int kThreads = 64;
  const std::vector<int> first = run_order(Schedule{Schedule::Order::kShuffled, 7}, kThreads);
  CHECK(run_order(Schedule{Schedule::Order::kShuffled, 7}, kThreads) == first);
  CHECK(run_order(Schedule{Schedule::Order::kShuffled, 8}, kThreads) != first);

  const std::vector<int> phase1(first.begin(), first.begin() + kThreads);
  const std::vector<int> phase2(first.begin() + kThreads, first.end());
  CHECK(phase1 != phase2);
  std::vector<int> sorted = phase1;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(kThreads);
  std::iota(all.begin(), all.end(), 0);
  CHECK(sorted == all);
}

}  // namespace
}  // namespace dslaunch::kernels::simt
