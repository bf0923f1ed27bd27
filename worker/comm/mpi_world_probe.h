#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dslaunch::worker::comm {

// Who one rank is, as MPI itself sees it.
struct RankIdentity {
  int rank = 0;
  int world_size = 0;
  int local_rank = 0;  // rank among the ranks sharing this node's memory
  int local_world_size = 0;
  std::string host;
  int64_t pid = 0;
};

struct WorldProbe {
  RankIdentity self;
  std::vector<RankIdentity> ranks;  // every rank, in rank order; on rank 0 only
  std::string mpi_library;          // MPI_Get_library_version, first line
  // Every rank's all-reduce of (rank + 1) gave world·(world + 1)/2.
  bool allreduce_ok = false;
  std::string error;  // the first MPI call that failed; the rest is then unset
};

// `dsworker probe`: MPI's own view of the world, with no process groups or
// streams (it checks the transport they rely on). Collective over
// MPI_COMM_WORLD, on the thread that initialised MPI: every rank must call it.
// Reports each rank's identity to rank 0 and checks an all-reduce end to
// end; failures come back as `error` (MPI_ERRORS_RETURN).
WorldProbe probe_mpi_world();

}  // namespace dslaunch::worker::comm
