#pragma once


#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker {

// ZeRO's partitioning of a flat buffer of `total` floats over the ranks of
// a data-parallel group: rank r owns the contiguous floats [begin(r),
// end(r)). Every partition has the same padded size, a multiple of
// `alignment` floats, so partitions are balanced to within one alignment
// unit and gathering them is one all-gather of equal blocks; buffers that
// take part in a gather hold padded_total() floats (the tail beyond total
// is padding, never read as parameters).
struct ZeroPartition {
  int64_t total = 0;
  int ranks = 1;
  int64_t partition_size = 0;  // floats per rank, padding included

  int64_t padded_total() const { return partition_size * ranks; }
  int64_t begin(int rank) const;
  int64_t end(int rank) const;  // clipped to total: the last partitions may be short or empty
};

// The alignment the trainer partitions with: partitions start on 64-byte
// boundaries, whole cache lines and AVX-512 vectors for the optimizer's loops.
constexpr int64_t kZeroPartitionAlignment = 16;

// Precondition: total >= 0, ranks >= 1, alignment >= 1.
ZeroPartition make_zero_partition(int64_t total, int ranks, int64_t alignment);

// Every rank's partition of `buffer` (padded_total() floats), gathered in
// place so that every rank ends with the whole buffer: rank r's block
// [r·partition_size, (r+1)·partition_size) comes from rank r. Collective
// over `comm`, whose size must equal partition.ranks. Like DeepSpeed's
// allgather_bucket_size, `bucket_size` bounds the floats one collective
// moves: rounds of max(1, bucket_size / ranks) floats of every partition
// (and at most INT_MAX, MPI counting in ints; so does it the offsets in the
// buffer, which holds at most INT_MAX floats past each round's start).
core::Status all_gather_partitions(comm::Communicator& comm, const ZeroPartition& partition,
                                   int64_t bucket_size, float* buffer);

// Every rank's floats of `ranges` (floats [begin, end) of the layout, in
// increasing order) packed rank after rank: block r holds rank r's
// partition's part of each range in turn (ZeRO stage 3's persistent
// tensors, all-gathered in one collective).
comm::Blocks packed_range_blocks(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                 const ZeroPartition& partition);

}  // namespace dslaunch::worker
