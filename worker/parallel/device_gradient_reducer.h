#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "worker/comm/communicator.h"
#include "worker/parallel/gradient_buckets.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker {

// The data group's mean of gradients that live in a device's memory (a
// GPU's, training with every model state there), over a communicator whose
// collectives take device buffers (NCCL's, or host staging's). It cuts the
// buffer into GradientReducer's buckets and ZeRO's shares
// (gradient_buckets.h) and does its arithmetic with the device's kernels:
// each bucket's shares summed by a reduce-scatter (16-bit communication: an
// all-to-all of the rounded shares, summed in fp32 in rank order), the sum
// divided by the ranks, then gathered back (all_reduce) or added to this
// rank's partition (ready()), in 16-bit communication through
// the wire type's rounding. So its means equal GradientReducer's bit for
// bit wherever the device's kernels equal the CPU's and the communicator
// sums as MPI does (the host-staged one, on the emulator); NCCL adds in an
// order of its own.
//
// The all-reduce runs after backward; the reduce-scatter as backward
// reports its finished ranges (ready()), each bucket the moment it is
// complete, so that the gradient buffer can give a bucket's memory back
// before backward writes the next (DeviceGradientPages). Each collective is
// waited for before the next kernel: no overlap with backward yet.
// Quantized gradients (ZeRO++'s qgZ) are not done here.
class DeviceGradientReducer {
 public:
  // n floats over `comm` (more than one rank), averaged in buckets of
  // bucket_elements (capped as GradientReducer caps them), travelling as
  // `wire` (fp32, bf16 or fp16). Its buffers are in `device`'s memory
  // (buffer_bytes()); throws std::bad_alloc when it has no room. `comm` and
  // `device` must outlive it.
  DeviceGradientReducer(comm::Communicator& comm, kernels::Backend& device, int64_t n,
                        int64_t bucket_elements, core::DType wire);

  // ZeRO stages 0-1: grads[0, n) becomes the mean over ranks.
  core::Status all_reduce(float* grads);
  // ZeRO stages 2-3 (reduce-scatter mode): where ready() reads the
  // gradients and adds their means, and whom it tells a bucket is done.
  struct ScatterTarget {
    const float* grads = nullptr;      // n floats, backward's
    float* partition_grads = nullptr;  // this rank's ZeRO partition of them
    // Floats [begin, end) of grads are reduced: the caller may zero them or
    // give their memory back.
    std::function<void(int64_t begin, int64_t end)> consumed;
  };
  // Before the first ready(); `target` stays in use until the next call.
  void scatter_into(ScatterTarget target) { target_ = std::move(target); }
  // Floats [begin, end) of target.grads hold this micro-batch's gradient
  // (BucketProgress's rules: each float once, any order). Each bucket this
  // completes is reduced now, in index order: the mean of its share added
  // to partition_grads (in 16-bit communication through the wire type's
  // rounding, as all_reduce() rounds the mean it gathers), then consumed.
  // After a misuse or failed collective nothing more is reduced; finish()
  // says what.
  void ready(int64_t begin, int64_t end);
  // After each micro-batch's backward: ok when every float was reported and
  // reduced, else the first misuse or failure. Starts the next micro-batch.
  core::Status finish();

  // Device bytes its buffers hold (core::device_state_bytes()'
  // communication_buffers).
  int64_t buffer_bytes() const;

 private:
  // This rank's share of the bucket [begin, end) summed over ranks, into
  // summed_ (its first `own` floats).
  core::Status sum_share(const float* bucket, const comm::Blocks& shares);
  bool narrow() const { return wire_ != core::DType::kF32; }
  // Bucket [begin, end)'s mean added to the target's partition.
  core::Status add_bucket_mean(int64_t begin, int64_t end);

  comm::Communicator& comm_;
  kernels::Backend& device_;
  const int64_t n_;
  const int64_t bucket_elements_;
  const core::DType wire_;
  const ZeroPartition partition_;
  const int rank_;
  const int ranks_;
  // The largest share of a bucket this rank sums (at least one float).
  const int64_t largest_share_;
  kernels::DeviceBuffer<float> summed_;
  // 16-bit communication: a bucket rounded, every rank's share of it for
  // this one, this rank's mean rounded (and gathered into the bucket's
  // place in `sent_`), and a share widened.
  kernels::DeviceBuffer<uint16_t> sent_;
  kernels::DeviceBuffer<uint16_t> received_;
  kernels::DeviceBuffer<float> widened_;
  ScatterTarget target_;
  BucketProgress progress_;
  core::Status error_;  // the first misuse or failure since finish()
};

}  // namespace dslaunch::worker
