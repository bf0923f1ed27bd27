#pragma once

// A CPU emulator of CUDA's block/thread execution model, so that a CUDA
// kernel body written once as a template over its Thread type runs in tests
// on a machine with no GPU: its indexing, shared-memory and warp-shuffle logic
// is exercised with CUDA's semantics. It is hand-written because no Debian
// package runs CUDA's thread model on a CPU (HIP-CPU, which does, is not
// packaged); it is small, and strict where CUDA leaves things undefined.
//
// Semantics of emulate_launch():
// - Blocks run one after another, in the order the Schedule gives (CUDA
//   promises none).
// - Each thread of a block is a fiber. Threads run one at a time, each from
//   one barrier (sync_threads() or a warp shuffle) to the next, in the
//   Schedule's order; a shuffled schedule draws a new order for every phase.
//   A missing __syncthreads therefore shows: a thread that reads shared memory
//   another thread writes in the same phase sees the old value under one of
//   the orders.
// - Each block gets fresh dynamic shared memory, 16-byte aligned and filled
//   with 0xFF bytes (NaN as float or double, so an unwritten slot reads as
//   NaN), between guard bytes checked after the block.
// - sync_threads() waits for every thread of the block; a shuffle waits for
//   the 32 lanes of the caller's warp only.
// - KernelFault for what CUDA calls undefined: a __syncthreads that some
//   threads return before reaching, lanes of a warp waiting at different
//   barriers, a full-mask shuffle in a partial warp or with a lane missing,
//   writes past either end of shared memory.
// - An exception a body throws (a test assertion, a KernelFault) leaves
//   emulate_launch() after the block's other threads are unwound.
// - The same Schedule gives the same run, step for step.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/simt/launch_shape.h"  // LaunchShape: <<<grid, block, shared_bytes>>>

namespace dslaunch::kernels::simt {

namespace detail {
class BlockRun;
}

// The Thread a kernel body gets from emulate_launch(). The device-side Thread,
// which wraps CUDA's builtins, must have the same members, so that a body
// written as a template over Thread compiles for both. Blocks are 1-D.
class EmulatedThread {
 public:
  static constexpr int kWarpSize = 32;

  int thread_index() const { return thread_index_; }  // threadIdx.x
  int block_index() const { return block_index_; }    // blockIdx.x
  int block_size() const { return block_size_; }      // blockDim.x
  int grid_size() const { return grid_size_; }        // gridDim.x
  int lane() const { return thread_index_ % kWarpSize; }
  int warp() const { return thread_index_ / kWarpSize; }

  // __syncthreads().
  void sync_threads();

  // __shfl_xor_sync(0xffffffff, value, lane_mask): the value of lane
  // lane() ^ lane_mask. Every lane of the warp must call it; lane_mask is in
  // [0, 32).
  float shfl_xor(float value, int lane_mask);
  double shfl_xor(double value, int lane_mask);

  // The launch's dynamic shared memory (extern __shared__), shared_bytes long.
  template <class T>
  T* shared_memory() {
    return reinterpret_cast<T*>(shared_memory_);
  }

 private:
  friend class detail::BlockRun;
  EmulatedThread(detail::BlockRun* block_run, int thread_index, int block_index, int block_size,
                 int grid_size, std::byte* shared_memory)
      : block_run_(block_run),
        thread_index_(thread_index),
        block_index_(block_index),
        block_size_(block_size),
        grid_size_(grid_size),
        shared_memory_(shared_memory) {}

  detail::BlockRun* block_run_;
  int thread_index_;
  int block_index_;
  int block_size_;
  int grid_size_;
  std::byte* shared_memory_;
};

// The order the emulator runs a grid's blocks in, and a block's threads in
// between two barriers.
struct Schedule {
  enum class Order { kForward, kReverse, kShuffled } order = Order::kForward;
  uint64_t seed = 0;  // kShuffled only
};

// "forward", "reverse" or "shuffled (seed 3)", for test messages.
std::string describe(const Schedule& schedule);

// Forward, reverse and a few shuffled schedules: the set a kernel test runs
// under to show that its result does not depend on the order.
std::vector<Schedule> standard_schedules();

// A kernel did something CUDA leaves undefined (see the top of this file).
class KernelFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
void run_launch(const LaunchShape& shape, const Schedule& schedule,
                const std::function<void(EmulatedThread&)>& body);
}

// Runs body(thread) for every thread of every block of the launch, with the
// semantics at the top of this file, on the calling thread; returns when all
// have returned. The body is called through a reference, never copied.
// Throws std::invalid_argument for a shape CUDA would refuse (grid >= 1,
// 1 <= block <= 1024, 0 <= shared_bytes <= 48 KiB), KernelFault, or whatever
// a body threw. A body must not swallow every exception (catch (...) without
// rethrowing): the emulator unwinds suspended threads with one.
template <class Body>
void emulate_launch(const LaunchShape& shape, const Schedule& schedule, Body&& body) {
  detail::run_launch(shape, schedule, [&body](EmulatedThread& thread) { body(thread); });
}

}  // namespace dslaunch::kernels::simt
