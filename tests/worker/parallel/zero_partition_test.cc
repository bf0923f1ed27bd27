#include "worker/parallel/zero_partition.h"

#include <catch2/catch.hpp>

#include <vector>

#include "core/status.h"
#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"

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
  comm::Communicator& data = comm::testing::world_groups().data();
  const int rank = data.rank();
  const int size = data.size();
  for (const int64_t total : {1L, 37L, 4096L, 100'003L}) {
    const ZeroPartition p = make_zero_partition(total, size, 16);
    std::vector<float> buffer(p.padded_total(), -1.0f);
    // Each rank writes only its own partition; the rest is stale.
    for (int64_t i = p.begin(rank); i < p.end(rank); ++i) buffer[i] = static_cast<float>(i);
    REQUIRE_OK(all_gather_partitions(data, p, p.padded_total(), buffer.data()));
    for (int64_t i = 0; i < total; ++i) REQUIRE(buffer[i] == static_cast<float>(i));
  }
}

TEST_CASE("all_gather_partitions gives the same buffer in buckets of any size") {
  comm::Communicator& data = comm::testing::world_groups().data();
  const int rank = data.rank();
  const int size = data.size();
  for (const int64_t total : {1L, 37L, 1000L}) {
    const ZeroPartition p = make_zero_partition(total, size, 16);
    // 0 and 1: one float of each partition per round; 7: 7/size floats, not
    // dividing the partition; the last: the whole buffer at once.
    for (const int64_t bucket : {0L, 1L, 7L, 64L, 1000L, p.padded_total()}) {
      INFO("total " << total << ", bucket " << bucket);
      std::vector<float> buffer(p.padded_total(), -1.0f);
      for (int64_t i = p.begin(rank); i < p.end(rank); ++i) buffer[i] = static_cast<float>(i);
      REQUIRE_OK(all_gather_partitions(data, p, bucket, buffer.data()));
      for (int64_t i = 0; i < total; ++i) REQUIRE(buffer[i] == static_cast<float>(i));
    }
  }
}

}  // namespace
}  // namespace dslaunch::worker
