#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
// divided by the ranks, then gathered back into the bucket (all-reduce
// mode, ZeRO stages 0-1) or added to this rank's partition (reduce-scatter
// mode, stages 2-3), in 16-bit communication through the wire type's
// rounding. So its means equal GradientReducer's bit for bit wherever the
// device's kernels equal the CPU's and the communicator sums as MPI does
// (the host-staged one, on the emulator); NCCL adds in an order of its own.
//
// Backward reports its finished ranges (ready()), and each bucket is
// reduced once complete, in index order, as GradientReducer's are:
// - over a communicator whose operations run on a device stream
//   (Communicator::device_stream(): NCCL's), the bucket's kernels and
//   collectives are queued on that stream after the backward work queued
//   so far, and backward goes on while they run. ready() returns once at
//   most kBucketsInFlight buckets are queued and not yet known done: it
//   waits for the oldest (the host waits for its collectives, with their
//   timeouts, and its kernels), then reports it consumed, so that the
//   gradient buffer can give its memory back (DeviceGradientPages) before
//   backward writes much more. finish() waits for the rest.
// - over one that completes on the host (host staging's), each collective
//   is waited for before the next kernel, and a bucket is consumed before
//   ready() returns: nothing overlaps.
// Quantized gradients (ZeRO++'s qgZ) are not done here.
class DeviceGradientReducer {
 public:
  // What the device stream may have queued and not yet finished, beside
  // the bucket backward is completing (the plan's kGradientBucketsInFlight).
  static constexpr int64_t kBucketsInFlight = 2;

  // n floats over `comm` (more than one rank), averaged in buckets of
  // bucket_elements (capped as GradientReducer caps them), travelling as
  // `wire` (fp32, bf16 or fp16). Its buffers are in `device`'s memory
  // (buffer_bytes()); throws std::bad_alloc when it has no room. `comm` and
  // `device` must outlive it.
  DeviceGradientReducer(comm::Communicator& comm, kernels::Backend& device, int64_t n,
                        int64_t bucket_elements, core::DType wire);
  ~DeviceGradientReducer();

  // All-reduce mode: ready() makes each bucket of grads[0, n) the mean over
  // ranks, in place. Before the first ready(); grads stays in use until
  // the next call.
  void all_reduce_into(float* grads);
  // all_reduce_into(grads), the whole buffer ready, and finish().
  core::Status all_reduce(float* grads);
  // Reduce-scatter mode: where ready() reads the gradients and adds their
  // means, and whom it tells a bucket is done.
  struct ScatterTarget {
    const float* grads = nullptr;      // n floats, backward's
    float* partition_grads = nullptr;  // this rank's ZeRO partition of them
    // Floats [begin, end) of grads are reduced: the caller may zero them or
    // give their memory back.
    std::function<void(int64_t begin, int64_t end)> consumed;
  };
  // Before the first ready(); `target` stays in use until the next call.
  void scatter_into(ScatterTarget target);
  // Floats [begin, end) of the gradients hold this micro-batch's gradient
  // (BucketProgress's rules: each float once, any order), written by work
  // on the device's default stream queued before the call. Each bucket this
  // completes is reduced, in index order, as the top of this file says:
  // its floats must not be written again before finish(). After a misuse
  // or failed collective nothing more is reduced; finish() says what.
  void ready(int64_t begin, int64_t end);
  // After each micro-batch's backward: waits for every bucket; ok when
  // every float was reported and reduced, else the first misuse or
  // failure. The means are then in place for the default stream's next
  // work and for the host. Starts the next micro-batch.
  core::Status finish();

  // Device bytes its buffers hold (core::device_state_bytes()'
  // communication_buffers).
  int64_t buffer_bytes() const;

 private:
  // A bucket queued on the device stream, not yet known done.
  struct InFlight {
    GradientBucket bucket;
    std::vector<std::unique_ptr<comm::Work>> collectives;
    std::unique_ptr<kernels::Event> done;  // after its kernels
  };

  bool narrow() const { return wire_ != core::DType::kF32; }
  bool overlapped() const { return stream_ != nullptr; }
  std::string what() const;  // the mode, for messages
  // Queues (overlapped) or runs the bucket's reduction.
  void launch(const GradientBucket& bucket);
  // Its collectives and kernels, in order; the collectives' Work go to
  // started_ (overlapped) or are waited for at once.
  core::Status reduce(const GradientBucket& bucket);
  // This rank's share of the bucket [begin, end) summed over ranks, into
  // summed_ (its first `own` floats).
  core::Status sum_share(const float* bucket, const comm::Blocks& shares);
  // The mean of this rank's share gathered into the bucket's place in
  // `grads` (all-reduce mode), or added to the partition.
  core::Status gather_mean(float* values, const comm::Blocks& shares);
  void add_mean(int64_t begin, int64_t own);
  // A collective just started: kept for retire() (overlapped), or waited.
  core::Status started(std::unique_ptr<comm::Work> work);
  // Waits for the oldest bucket in flight and reports it consumed.
  void retire_oldest();
  void consumed(const GradientBucket& bucket);
  // Sets error_ (the first) with the bucket named.
  void failed(const GradientBucket& bucket, const core::Status& status);

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
  float* gather_grads_ = nullptr;  // all-reduce mode
  ScatterTarget target_;           // reduce-scatter mode
  BucketProgress progress_;
  // The communicator's device stream, borrowed (null: it completes on the
  // host), the point of the default stream each bucket waits for, and the
  // buckets queued there, oldest first, with their events kept for reuse.
  std::unique_ptr<kernels::Stream> stream_;
  std::unique_ptr<kernels::Event> backward_written_;
  std::deque<InFlight> in_flight_;
  std::vector<std::unique_ptr<kernels::Event>> spare_events_;
  std::vector<std::unique_ptr<comm::Work>> started_;  // the bucket being queued's
  core::Status error_;  // the first misuse or failure since finish()
};

}  // namespace dslaunch::worker
