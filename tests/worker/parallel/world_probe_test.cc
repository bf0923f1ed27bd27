// Runs under mpirun (see mpi_test): every rank executes every test case.
#include "worker/comm/mpi_world_probe.h"

#include <mpi.h>
#include <unistd.h>

#include <set>

#include <catch2/catch.hpp>

using dslaunch::worker::comm::probe_mpi_world;

TEST_CASE("probe_mpi_world sees the world as MPI does") {
  // The truth the probe is checked against.
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  const auto probe = probe_mpi_world();
  REQUIRE(probe.error.empty());
  CHECK(probe.allreduce_ok);
  CHECK(probe.self.rank == rank);
  CHECK(probe.self.world_size == size);
  CHECK(probe.self.pid == getpid());
  CHECK(probe.mpi_library.rfind("Open MPI v", 0) == 0);
  CHECK(probe.mpi_library.back() != ' ');
  CHECK(probe.mpi_library.find('\0') == std::string::npos);
  // All ranks share this host, so node-local numbering is the world's.
  CHECK(probe.self.local_rank == rank);
  CHECK(probe.self.local_world_size == size);
  if (rank == 0) {
    REQUIRE(static_cast<int>(probe.ranks.size()) == size);
    std::set<int64_t> pids;
    for (int r = 0; r < size; ++r) {
      CHECK(probe.ranks[r].rank == r);
      CHECK(probe.ranks[r].host == probe.self.host);
      pids.insert(probe.ranks[r].pid);
    }
    CHECK(static_cast<int>(pids.size()) == size);
  } else {
    CHECK(probe.ranks.empty());
  }
}
