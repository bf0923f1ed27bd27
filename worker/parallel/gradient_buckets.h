#pragma once

#include <cstdint>
#include <vector>

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

}  // namespace dslaunch::worker
