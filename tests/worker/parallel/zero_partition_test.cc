#include "worker/parallel/zero_partition.h"

#include <mpi.h>

#include <catch2/catch.hpp>

#include <vector>

namespace dslaunch::worker {
namespace {

TEST_CASE("partitions are contiguous, aligned, balanced and cover the buffer exactly") {
  for (const int64_t total : {0L, 1L, 15L, 16L, 17L, 1000L, 3'290'624L}) {
    for (const int ranks : {1, 2, 3, 4, 8}) {
      const ZeroPartition p = make_zero_partition(total, ranks, 16);
      INFO("total " << total << ", ranks " << ranks);
      CHECK(p.partition_size % 16 == 0);
      CHECK(p.padded_total() >= total);
      CHECK(p.padded_total() - total < 16 * ranks + ranks);
      CHECK(p.begin(0) == 0);
      CHECK(p.end(ranks - 1) == total);
      for (int r = 0; r + 1 < ranks; ++r) CHECK(p.end(r) == p.begin(r + 1));
      for (int r = 0; r < ranks; ++r) {
        CHECK((p.begin(r) % 16 == 0 || p.begin(r) == total));  // empty ones sit at the end
        CHECK(p.end(r) - p.begin(r) <= p.partition_size);
      }
    }
  }
}

TEST_CASE("all_gather_partitions gives every rank every partition") {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (const int64_t total : {1L, 37L, 4096L, 100'003L}) {
    const ZeroPartition p = make_zero_partition(total, size, 16);
    std::vector<float> buffer(p.padded_total(), -1.0f);
    // Each rank writes only its own partition; the rest is stale.
    for (int64_t i = p.begin(rank); i < p.end(rank); ++i) buffer[i] = static_cast<float>(i);
    REQUIRE(all_gather_partitions(MPI_COMM_WORLD, p, p.padded_total(), buffer.data()) == "");
    for (int64_t i = 0; i < total; ++i) REQUIRE(buffer[i] == static_cast<float>(i));
  }
}

TEST_CASE("all_gather_partitions gives the same buffer in buckets of any size") {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (const int64_t total : {1L, 37L, 1000L}) {
    const ZeroPartition p = make_zero_partition(total, size, 16);
    // 0 and 1: one float of each partition per round; 7: 7/size floats, not
    // dividing the partition; the last: the whole buffer at once.
    for (const int64_t bucket : {0L, 1L, 7L, 64L, 1000L, p.padded_total()}) {
      INFO("total " << total << ", bucket " << bucket);
      std::vector<float> buffer(p.padded_total(), -1.0f);
      for (int64_t i = p.begin(rank); i < p.end(rank); ++i) buffer[i] = static_cast<float>(i);
      REQUIRE(all_gather_partitions(MPI_COMM_WORLD, p, bucket, buffer.data()) == "");
      for (int64_t i = 0; i < total; ++i) REQUIRE(buffer[i] == static_cast<float>(i));
    }
  }
}

}  // namespace
}  // namespace dslaunch::worker
