#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/layout/range_set.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "worker/parallel/partition_swap.h"

namespace dslaunch::worker {

// One rank's partition of the gradients under ZeRO stages 2 and 3, floats
// [own_begin, own_end) of the layout, summed over a step's micro-batches:
// in memory, or in a swap file (ZeRO-Infinity's offload_optimizer device
// nvme, which swaps the gradients out with the optimizer's moments, as
// DeepSpeed does) so that none of it stays resident. A swapped partition
// comes in a range at a time: each bucket's share is read, added to and
// written back (in a step's first micro-batch, whose sums start from zero,
// only what that micro-batch already added is read), and the norm and the
// optimizer read it a group at a time.
//
// Threads: add() runs on the gradient reducer's communication stream (with
// one rank, on the compute thread) between begin_sum() or end_sum() and the
// next end_sum(); the other calls run on the compute thread while no add()
// is in flight.
class GradientPartition {
 public:
  // In memory (the backend's).
  GradientPartition(kernels::Backend& backend, int64_t own_begin, int64_t own_end);
  // In `swap` (its partition starts at own_begin), added to `piece_floats`
  // at a time.
  GradientPartition(kernels::Backend& backend, std::unique_ptr<PartitionSwap> swap,
                    int64_t own_begin, int64_t piece_floats = int64_t{1} << 20);

  bool swapped() const { return swap_ != nullptr; }
  // In memory: the partition (element 0 is the gradient of own_begin);
  // swapped: nullptr.
  float* data() { return memory_.empty() ? nullptr : memory_.data(); }

  // A step's sum starts: every float counts as 0 until added to.
  void begin_sum();
  // A micro-batch's reduction is complete: every float has been added to.
  void end_sum() {
    fresh_ = false;
    written_.clear();
  }
  // add(own, first, count) adds to floats [begin + first, begin + first +
  // count) of the layout, own[0] the first of them; called for pieces that
  // cover [begin, end) once (one piece in memory; swapped, pieces of at most
  // piece_floats, so the buffer stays small whatever the bucket size).
  core::Status add(int64_t begin, int64_t end,
                   const std::function<void(float* own, int64_t first, int64_t count)>& add);

  // x *= factor, for every float (clipping, fp16's unscaling); swapped, the
  // product is taken as each range is read.
  void scale(float factor);
  // Floats [begin, end) of the layout, scaled: a pointer into the partition
  // in memory, or into a buffer valid until the next read() or
  // release_buffer() when swapped.
  core::StatusOr<const float*> read(int64_t begin, int64_t end);
  // Gives back read()'s buffer (an optimizer step's swap group of floats).
  void release_buffer() { std::vector<float>().swap(read_buffer_); }

  // Bytes held in memory: the partition, or the swap's buffers.
  int64_t memory_bytes() const;

 private:
  // Floats [from, to) of the sum into add_buffer_ (zeros where none added yet).
  core::Status read_sum(int64_t from, int64_t to);

  kernels::Backend& backend_;
  const int64_t own_begin_;
  const int64_t piece_floats_ = 0;
  std::vector<float> memory_;
  std::unique_ptr<PartitionSwap> swap_;
  bool fresh_ = true;
  // While fresh_: the ranges of the layout added to since begin_sum() (the
  // rest of the swap file holds the last step's).
  core::RangeSet written_;
  float factor_ = 1.0f;
  std::vector<float> add_buffer_;   // the reducer thread's
  std::vector<float> read_buffer_;  // the compute thread's
};

}  // namespace dslaunch::worker
