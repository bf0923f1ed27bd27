#include "worker/parallel/zero_partition.h"

#include <algorithm>
#include <climits>


namespace dslaunch::worker {

int64_t ZeroPartition::begin(int rank) const {
  return std::min(static_cast<int64_t>(rank) * partition_size, total);
}

int64_t ZeroPartition::end(int rank) const {
  return std::min((static_cast<int64_t>(rank) + 1) * partition_size, total);
}

ZeroPartition make_zero_partition(int64_t total, int ranks, int64_t alignment) {
  ZeroPartition partition;
  partition.total = total;
  partition.ranks = ranks;
  const int64_t per_rank = (total + ranks - 1) / ranks;
  partition.partition_size = (per_rank + alignment - 1) / alignment * alignment;
  return partition;
}

core::Status all_gather_partitions(comm::Communicator& comm, const ZeroPartition& partition,
                                   int64_t bucket_size, float* buffer) {
  if (partition.ranks == 1) return {};
  // Every rank sends slice k of its partition in round k, so round k gathers
  // slice k of every partition, strided by partition_size.
  const int64_t round = std::clamp<int64_t>(bucket_size / partition.ranks, 1, INT_MAX);
  comm::Blocks blocks;
  for (int r = 0; r < partition.ranks; ++r) {
    blocks.displacements.push_back(r * partition.partition_size);
  }
  const int me = comm.rank();
  for (int64_t offset = 0; offset < partition.partition_size; offset += round) {
    const int64_t count = std::min(round, partition.partition_size - offset);
    blocks.counts.assign(partition.ranks, count);
    float* base = buffer + offset;
    auto work = comm.all_gather(comm::buffer_of(base + blocks.displacements[me], count),
                                comm::buffer_of(base, partition.padded_total() - offset), blocks);
    if (core::Status status = work->wait(); !status.ok()) return status;
  }
  return {};
}

comm::Blocks packed_range_blocks(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                 const ZeroPartition& partition) {
  comm::Blocks blocks;
  int64_t packed = 0;
  for (int r = 0; r < partition.ranks; ++r) {
    int64_t count = 0;
    for (const auto& [begin, end] : ranges) {
      count += std::max<int64_t>(
          0, std::min(end, partition.end(r)) - std::max(begin, partition.begin(r)));
    }
    blocks.displacements.push_back(packed);
    blocks.counts.push_back(count);
    packed += count;
  }
  return blocks;
}

}  // namespace dslaunch::worker
