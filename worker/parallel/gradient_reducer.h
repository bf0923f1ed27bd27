#pragma once

#include <condition_variable>
#include <memory>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "worker/comm/communicator.h"
#include "worker/parallel/gradient_buckets.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker {

// Data-parallel gradient averaging, overlapped with the backward pass: an
// all-reduce that leaves every rank the whole mean, or (ZeRO stage 2) a
// reduce-scatter that leaves each rank the mean of its own partition only.
//
// The flat gradient buffer is cut once into contiguous buckets of
// `bucket_elements` floats, aligned to the END of the buffer: bucket 0 is the
// last `bucket_elements` floats, bucket 1 the ones before them, and the first
// bucket of the buffer takes the remainder. The backward pass finishes
// gradients from the end of the buffer towards its start, so the buckets
// complete in index order. A bucket is launched once all its floats have been
// reported by ready() AND every bucket before it in index order has been
// launched: collectives need the same sequence of collectives on every rank, and
// launching in index order makes it so whatever order each rank reports its
// ranges in. Ranges reported front-first are still correct, only reduced
// later (no overlap).
//
// A communication thread, the only one starting collectives for this object
// (on a duplicate of the data communicator of its own), reduces each
// launched bucket in turn, in index order:
// - reduce-scatter mode: a reduce-scatter of the bucket with rank r
//   receiving the bucket's intersection with partition r (possibly empty)
//   into a temporary of at most one bucket's floats; the sum divided by the
//   communicator's size is ADDED to this rank's partition gradients. The
//   bucket's floats in the workspace are then zeroed, their whole pages given
//   back to the OS (see ReleasableBuffer), so a workspace holds at a time
//   only the gradients that backward has written and the reducer not yet
//   consumed, and after finish() it is all zeros again, ready for the next
//   backward to accumulate into. One finish() per backward pass: with
//   gradient accumulation every micro-batch is reduced (as DeepSpeed's stage
//   2 does), its mean added to the partition. ready() and ready_part()
//   return only once at most kBucketsInFlight launched buckets are not yet
//   reduced: where communication is slower than backward, the workspace
//   still holds at most those buckets, one not yet complete and what
//   backward writes next, never the whole gradient.
// - all-reduce mode: the same reduce-scatter over ZeRO's partition of the
//   buffer (make_zero_partition with kZeroPartitionAlignment), the mean of
//   this rank's share then all-gathered back into the bucket, so after
//   finish() the buffer holds the mean over ranks. Not an all-reduce: that
//   adds the ranks' values in an order of its own choosing, which from three
//   ranks on differs from the reduce-scatter's; this way every float is
//   summed by the same collective with the same counts in both modes, and
//   ZeRO stages 0–1 and 2–3 average gradients to the same bits.
//
// bucket_elements counts floats, as DeepSpeed's zero_optimization.
// reduce_bucket_size counts elements (its default 5e8 is 500M elements, 2 GB
// of fp32); it is capped at n and at kMaxQuantizableCount (just under INT_MAX: MPI
// counts in ints, and a quantized bucket takes a little more than a byte a float).
//
// On a communicator of one rank there is no thread and no communication: in
// all-reduce mode ready() only checks its ranges and finish() leaves the
// values as they are; in reduce-scatter mode ready() adds each completed
// bucket to the partition (the whole buffer) and zeroes it itself.
//
// Threads: ready() and finish() from one thread (the compute thread), never
// concurrently; reduced_buckets() and the other accessors from any thread.
// Between the ready() that covers a float and the next finish() return, the
// caller must neither read nor write that float: the communication thread
// owns it.
class GradientReducer {
 public:
  // Reduce-scatter mode: launched buckets (and parts) that may wait for the
  // communication thread before ready() blocks backward.
  static constexpr int64_t kBucketsInFlight = 2;

  // grads: the flat gradient buffer of n floats, owned by the caller, alive
  // and not moved for this object's lifetime. comm: the data-parallel
  // communicator; it is duplicated so this traffic never meets other traffic
  // on it (collective over comm when it has more than one rank). A failure
  // here (bad arguments, the duplicate) makes every finish() return it;
  // ready() then does nothing.
  GradientReducer(comm::Communicator& comm, float* grads, int64_t n, int64_t bucket_elements);

  // Reduce-scatter mode over workspace.size() floats (see above), with the
  // same conditions as the all-reduce constructor. partition: over the ranks
  // of comm, covering partition.total == workspace.size() floats.
  // partition_grads: this rank's partition, partition.end(rank) -
  // partition.begin(rank) floats, owned by the caller, alive and not moved;
  // the reducer only adds to it (the caller zeroes it when a new sum starts).
  // Between a ready() and the next finish() return the caller must not touch
  // partition_grads either.
  GradientReducer(comm::Communicator& comm, ReleasableBuffer& workspace, int64_t bucket_elements,
                  const ZeroPartition& partition, float* partition_grads);
  // The same, where the partition is not one buffer in memory (a swapped
  // GradientPartition): add(begin, end, fn) has fn(own, first, count) add
  // to floats [begin + first, begin + first + count) of the layout, own[0]
  // the first of them, for pieces that cover [begin, end) once, and returns
  // what failed, which fails finish(). Called on the communication thread
  // (with one rank, in ready()).
  using AddToShare = std::function<void(float* own, int64_t first, int64_t count)>;
  using ShareAdder =
      std::function<core::Status(int64_t begin, int64_t end, const AddToShare& fn)>;
  GradientReducer(comm::Communicator& comm, ReleasableBuffer& workspace, int64_t bucket_elements,
                  const ZeroPartition& partition, ShareAdder add);

  // Reduces every bucket already launched (every rank launched the same
  // ones, so each rank's collectives stay matched with its peers'), then
  // joins the thread and frees the duplicate communicator. A peer that never
  // reduces them keeps this waiting until the communicator's timeout (in the
  // worker, a hang report).
  ~GradientReducer();

  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Floats [begin, end) hold their final gradient for this step. Each float
  // must be reported exactly once per step; ranges may come in any order and
  // size. Launches every bucket this completes (see above) and returns
  // without waiting for their communication, except that in reduce-scatter
  // mode over several ranks it first waits until at most kBucketsInFlight
  // buckets are left to reduce. A range outside [0, n), reversed, or
  // covering a float already reported is ignored and makes finish() fail.
  void ready(int64_t begin, int64_t end);

  // Reduce-scatter mode: floats [begin, end) hold a PART of their gradient
  // for this micro-batch that may be reduced now (ZeRO stage 3's tied
  // output layer, a vocabulary chunk at a time): its mean is added to the
  // partition and the floats zeroed, ahead of any bucket not yet launched,
  // in pieces of at most a bucket. Every rank must make the same calls in
  // the same order relative to ready(). The floats are reported again
  // through ready() once the rest of their gradient is in; between this
  // call and wait_parts()' return the caller must not touch them. Waits
  // for buckets in flight as ready() does. In all-reduce mode a misuse that
  // fails finish().
  void ready_part(int64_t begin, int64_t end);
  // Waits until every part passed to ready_part() is reduced.
  void wait_parts();

  // Waits until every launched bucket is reduced; then the buffer holds the
  // mean over ranks and the object is ready for the next step. Returns ok,
  // else what went wrong: the construction error, a misuse of ready()
  // (kInvalidArgument), floats never reported (first bucket named), a
  // failed add to a ShareAdder's partition, or the
  // first communication failure, which sticks (no collective is started on
  // this communicator again). A collective that does not complete within the
  // communicator's timeout is kDeadlineExceeded: a peer never started it,
  // which the caller reports as a hang.
  core::Status finish();

  // The element type gradients travel in (DeepSpeed's
  // communication_data_type): kF32, the default, or kBF16/kF16. Then each
  // bucket's shares are rounded to it and exchanged by an all-to-all, each
  // rank sums its share in fp32 (adding the ranks' values in rank order)
  // and divides; in all-reduce mode the mean is rounded again and
  // all-gathered. Half the bytes on the wire. Before the first ready().
  void set_communication_type(core::DType dtype) { wire_type_ = dtype; }
  // ZeRO++'s quantized gradients (qgZ), reduce-scatter mode only: each
  // rank's shares go out int8 block-quantized (block_quantizer) through an
  // all-to-all and are summed in fp32, about a quarter of fp32's bytes
  // (DeepSpeed sends int4 in two hops, within and across hosts; here int8
  // in one). Overrides the communication type. Before the first ready().
  void set_quantized(bool quantized) { quantized_ = quantized; }

  // Heap bytes held: the bucket table and the queue of jobs, the temporary
  // receiving this rank's share of a bucket and the tables of counts (on one rank, in all-reduce
  // mode, only the bucket table). The transport may use scratch space of its
  // own while a bucket is reduced, not counted here.
  int64_t buffer_bytes() const;

  int64_t bucket_count() const {
    return progress_ ? static_cast<int64_t>(progress_->buckets().size()) : 0;
  }
  // Buckets (and parts) reduced since the last finish(); thread-safe.
  int64_t reduced_buckets() const;

 private:
  struct Bucket {
    int64_t begin = 0;
    int64_t end = 0;
    bool part = false;  // a ready_part() piece, not one of the buckets
  };

  // Partitioned gradients (reduce-scatter mode).
  struct Scatter {
    ReleasableBuffer* workspace = nullptr;
    ShareAdder add;
  };

  // How a bucket is cut among the ranks: rank r's share is its intersection
  // with partition r.
  struct Shares {
    ZeroPartition partition;
    int rank = 0;
    comm::Blocks blocks;  // per rank, for the bucket being reduced, from its start
    std::vector<float> received;     // this rank's share of one bucket
  };

  // What both constructors do once the mode is set.
  void start(comm::Communicator& comm, int64_t bucket_elements);
  core::Status setup_shares();
  void cut(const Bucket& bucket);               // fills shares_.blocks
  // Starts the bucket's reduce-scatter into shares_.received.
  std::unique_ptr<comm::Work> start_sum(const Bucket& bucket);
  // Reduce-scatter mode: adds the mean of `summed` (this rank's share of the
  // bucket's sum) to the partition, and releases the bucket's workspace. A
  // failed add is kept for finish(); the communication goes on, so that
  // every rank still runs the same collectives.
  void add_share(const Bucket& bucket, const float* summed);
  // Queues jobs [first, last) for the communication thread (with one rank,
  // reduces them here).
  void launch(std::vector<Bucket>::const_iterator first, std::vector<Bucket>::const_iterator last);
  void communication_loop();
  core::Status reduce(const Bucket& bucket);  // communication thread only
  core::Status all_reduce(const Bucket& bucket);
  core::Status reduce_scatter(const Bucket& bucket);
  // 16-bit communication: the bucket's shares rounded and exchanged, then
  // (on the stream) this rank's share summed in fp32 into shares_.received;
  // the operations, to be waited in order.
  std::vector<std::unique_ptr<comm::Work>> start_narrow_sum(const Bucket& bucket);
  // The same with int8 blocks (set_quantized).
  std::vector<std::unique_ptr<comm::Work>> start_quantized_sum(const Bucket& bucket);
  core::Status narrow_all_reduce(const Bucket& bucket);

  float* const grads_;
  const int64_t n_;
  std::optional<Scatter> scatter_;
  Shares shares_;
  core::DType wire_type_ = core::DType::kF32;
  // 16-bit communication's buffers: the bucket rounded, every rank's
  // rounded share of it for this one, this rank's mean rounded, and every
  // rank's mean gathered.
  struct Narrow {
    std::vector<uint16_t> sent, received, mean, gathered;
    comm::Blocks received_blocks;
  };
  Narrow narrow_;
  bool quantized_ = false;
  // Quantized gradients' buffers: every share quantized, every rank's
  // quantized share for this one, and one share dequantized.
  struct Quantized {
    std::vector<uint8_t> sent, received;
    comm::Blocks sent_blocks, received_blocks;
    std::vector<float> values;
  };
  Quantized quantized_buffers_;
  int64_t bucket_elements_ = 1;
  // The buckets (in launch order, the first ending at n_) and which are
  // complete; set by start() (compute thread only).
  std::optional<BucketProgress> progress_;
  std::unique_ptr<comm::Communicator> comm_;  // our duplicate; none on one rank
  int size_ = 1;
  core::Status setup_error_;
  core::Status usage_error_;  // compute thread only

  // What is reduced, in launch order since the last finish(): buckets (a
  // prefix of the buckets, in index order) and parts; the communication
  // thread's queue is jobs_[reduced_, end).
  mutable std::mutex mutex_;
  std::condition_variable launched_or_stopping_;
  std::condition_variable bucket_reduced_;
  std::vector<Bucket> jobs_;         // appended by the compute thread only, under mutex_
  int64_t parts_end_ = 0;            // jobs_ up to the last part (compute thread only)
  int64_t reduced_ = 0;
  core::Status communication_error_;
  core::Status add_error_;  // the first failed add_share() since finish()
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dslaunch::worker
