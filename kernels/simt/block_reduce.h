#pragma once

// Warp and block reductions for kernel bodies written once for the GPU and
// the emulator (emulator.h): a `Thread` is either. Every thread of the warp
// (block) gets the same bits: each butterfly step adds the same two values
// in both lanes, and the block's warp results are combined by every thread
// in warp order.

#include <cstdint>

#include "kernels/simt/host_device.h"

namespace dslaunch::kernels::simt {

inline constexpr int kWarpSize = 32;

template <class T>
struct Sum {
  DSL_HOST_DEVICE T operator()(T a, T b) const { return a + b; }
};

template <class T>
struct Max {
  DSL_HOST_DEVICE T operator()(T a, T b) const { return a > b ? a : b; }
};

// Reduces v over the 32 lanes of the warp; every lane gets the result.
template <class Thread, class T, class Op>
DSL_HOST_DEVICE T warp_reduce(Thread& thread, T v, Op op) {
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) v = op(v, thread.shfl_xor(v, mask));
  return v;
}

// Reduces v over the block (whose size must be a multiple of 32); every
// thread gets the result. `shared` holds at least block_size / 32 values
// and may be reused once this returns.
template <class Thread, class T, class Op>
DSL_HOST_DEVICE T block_reduce(Thread& thread, T v, T* shared, Op op) {
  v = warp_reduce(thread, v, op);
  if (thread.lane() == 0) shared[thread.warp()] = v;
  thread.sync_threads();
  T result = shared[0];
  const int warps = thread.block_size() / kWarpSize;
  for (int w = 1; w < warps; ++w) result = op(result, shared[w]);
  thread.sync_threads();
  return result;
}

// The first index a thread handles in a grid-stride loop, and the stride.
template <class Thread>
DSL_HOST_DEVICE int64_t grid_first(const Thread& thread) {
  return static_cast<int64_t>(thread.block_index()) * thread.block_size() + thread.thread_index();
}
template <class Thread>
DSL_HOST_DEVICE int64_t grid_stride(const Thread& thread) {
  return static_cast<int64_t>(thread.grid_size()) * thread.block_size();
}

// The row a warp of a warp_per_row_shape launch handles.
template <class Thread>
DSL_HOST_DEVICE int64_t warp_row(const Thread& t) {
  return static_cast<int64_t>(t.block_index()) * (t.block_size() / kWarpSize) + t.warp();
}

}  // namespace dslaunch::kernels::simt
