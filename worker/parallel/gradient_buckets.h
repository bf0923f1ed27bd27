#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "worker/comm/communicator.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker {

// How a flat gradient buffer of n floats is cut into the buckets the data
// group averages one collective at a time, and each rank's share of one:
// what the reducers over host memory (GradientReducer, whose comment says
// why the buckets are aligned to the buffer's end) and over device memory
// (DeviceGradientReducer) share, so that both run the same collectives on
// the same floats and their means agree bit for bit.
struct GradientBucket {
  int64_t begin = 0;
  int64_t end = 0;
};

// bucket_elements (DeepSpeed's reduce_bucket_size, >= 1) capped at n and
// at kMaxQuantizableCount (MPI counts in ints; a quantized bucket takes a
// little more than a byte a float).
int64_t capped_bucket_elements(int64_t n, int64_t bucket_elements);

// The buckets of capped_bucket_elements() floats from the buffer's end:
// bucket 0 is the last ones, the first bucket of the buffer the remainder.
std::vector<GradientBucket> gradient_buckets(int64_t n, int64_t bucket_elements);

// Rank r's share of floats [begin, end) is their intersection with its
// partition: partitions are consecutive, so the shares are consecutive
// blocks of the bucket, as a reduce-scatter lays them out (from its start).
comm::Blocks bucket_shares(const ZeroPartition& partition, int64_t begin, int64_t end);

// Which of a step's buckets are complete as backward reports the ranges of
// floats it has finished, for both reducers: a bucket is complete once all
// its floats are reported, and complete buckets are taken in index order
// only (bucket k once buckets 0 .. k-1 are taken), so that every rank
// reduces the same buckets in the same sequence whatever order it reports
// its ranges in.
class BucketProgress {
 public:
  // gradient_buckets(n, bucket_elements).
  BucketProgress(int64_t n, int64_t bucket_elements);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Buckets taken since the last reset().
  int64_t taken() const { return taken_; }

  // Counts floats [begin, end) as finished. A range outside [0, n),
  // reversed, or covering a float already reported since the last reset()
  // counts nothing and is kInvalidArgument (`what` names the caller).
  core::Status report(int64_t begin, int64_t end, std::string_view what);
  // Takes the complete buckets after those taken, up to the first
  // incomplete one: indices [first, end) of buckets().
  std::pair<int64_t, int64_t> take_complete();
  // ok once every bucket is taken; else kInvalidArgument naming the first
  // bucket with floats never reported.
  core::Status all_taken(std::string_view what) const;
  // Starts the next step: nothing reported, nothing taken.
  void reset();

 private:
  int64_t n_;
  int64_t bucket_elements_;
  std::vector<GradientBucket> buckets_;
  std::vector<int64_t> unreported_;  // floats of each bucket not yet reported
  int64_t taken_ = 0;
};

}  // namespace dslaunch::worker
