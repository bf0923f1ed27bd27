#include "worker/parallel/zero_partition.h"

#include <algorithm>
#include <climits>

#include "worker/parallel/mpi_error.h"

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

std::string all_gather_partitions(MPI_Comm comm, const ZeroPartition& partition,
                                  int64_t bucket_size, float* buffer) {
  if (partition.ranks == 1) return "";
  // Every rank sends slice k of its partition in round k, so round k gathers
  // slice k of every partition, strided by partition_size: a vector type
  // places them.
  const int64_t round = std::clamp<int64_t>(bucket_size / partition.ranks, 1, INT_MAX);
  const int64_t stride = partition.partition_size * static_cast<int64_t>(sizeof(float));
  for (int64_t offset = 0; offset < partition.partition_size; offset += round) {
    const int count = static_cast<int>(std::min(round, partition.partition_size - offset));
    MPI_Datatype block;
    MPI_Type_contiguous(count, MPI_FLOAT, &block);
    MPI_Datatype strided;
    MPI_Type_create_resized(block, 0, stride, &strided);
    MPI_Type_commit(&strided);
    const int rc =
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer + offset, 1, strided, comm);
    MPI_Type_free(&strided);
    MPI_Type_free(&block);
    if (rc != MPI_SUCCESS) return mpi_error_message("MPI_Allgather", rc);
  }
  return "";
}

}  // namespace dslaunch::worker
