// ZeRO stage 3's gathering: each rank holds only its partition, and a region
// acquired reads as the whole parameters while the rest of the workspace
// stays zero (not resident).
#include "worker/parallel/parameter_gatherer.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tests/worker/parallel/test_groups.h"
#include "worker/comm/communicator.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker {
namespace {

float value_at(int64_t i) { return 0.5f + static_cast<float>(i); }

// Fills this rank's partition of the layout whose float i holds
// value_at(i); the other partitions stay zero, as a stage 3 rank holds them.
void fill_own_partition(const ZeroPartition& partition, int rank, ReleasableBuffer& master) {
  for (int64_t i = partition.begin(rank); i < partition.end(rank); ++i) {
    master.data()[i] = value_at(i);
  }
}

TEST_CASE("an acquired region holds every rank's floats; a released one reads zero") {
  comm::Communicator& data = comm::testing::world_groups().data();
  const int rank = data.rank();
  const int size = data.size();
  const int64_t total = 1000;
  const ZeroPartition partition = make_zero_partition(total, size, 16);
  ReleasableBuffer master(partition.padded_total());
  fill_own_partition(partition, rank, master);
  ReleasableBuffer workspace(total);
  // Region 1 spans every partition; region 2 has a hole, [700, 800).
  ParameterGatherer gatherer(data, partition, master.data(), workspace,
                             {{{0, 100}}, {{100, 600}}, {{600, 700}, {800, 1000}}});
  REQUIRE(gatherer.region_count() == 3);
  const float* w = workspace.data();
  auto holds_values = [w](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (w[i] != value_at(i)) return false;
    }
    return true;
  };
  auto holds_zeros = [w](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (w[i] != 0.0f) return false;
    }
    return true;
  };

  gatherer.acquire(1);
  gatherer.prefetch(2);
  CHECK(holds_values(100, 600));
  CHECK(holds_zeros(0, 100));
  gatherer.acquire(2);
  CHECK(holds_values(600, 700));
  CHECK(holds_zeros(700, 800));
  CHECK(holds_values(800, 1000));
  gatherer.release(1);
  CHECK(holds_zeros(100, 600));
  CHECK(holds_values(600, 700));
  // Gathered again after a release, and after the owners changed their values.
  for (int64_t i = partition.begin(rank); i < partition.end(rank); ++i) master.data()[i] += 1;
  gatherer.acquire(1);
  for (int64_t i = 100; i < 600; ++i) {
    if (w[i] != value_at(i) + 1) FAIL("float " << i << " is " << w[i]);
  }
  gatherer.acquire(0);
  CHECK(w[50] == value_at(50) + 1);
  gatherer.release(0);
  gatherer.release(1);
  gatherer.release(2);
  CHECK(holds_zeros(0, total));
  CHECK(gatherer.error() == "");
}

TEST_CASE("a released region gives its pages back") {
  comm::Communicator& data = comm::testing::world_groups().data();
  const int rank = data.rank();
  const int size = data.size();
  const int64_t total = 1 << 20;  // 4 MiB
  const ZeroPartition partition = make_zero_partition(total, size, 16);
  ReleasableBuffer master(partition.padded_total());
  fill_own_partition(partition, rank, master);
  ReleasableBuffer workspace(total);
  ParameterGatherer gatherer(data, partition, master.data(), workspace,
                             {{{0, total / 2}}, {{total / 2, total}}});
  CHECK(workspace.resident_bytes() == 0);
  gatherer.acquire(0);
  CHECK(workspace.resident_bytes() >= total / 2 * 4);
  CHECK(workspace.resident_bytes() < total * 4);
  gatherer.release(0);
  CHECK(workspace.resident_bytes() <= 4096);
  CHECK(workspace.peak_resident_bytes() >= total / 2 * 4);
  CHECK(gatherer.error() == "");
}

}  // namespace
}  // namespace dslaunch::worker
