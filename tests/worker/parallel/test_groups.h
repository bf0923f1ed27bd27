#pragma once

// The process groups the MPI tests of worker/parallel and worker/engine run
// their communicators on (tests/support/catch_mpi_main.cc initialises MPI
// around the whole Catch session).
//
// Each shape's groups are created on first use, which is collective over the
// world (MPI_Comm_dup and MPI_Comm_split): every rank must make the first
// call for a shape at the same point, as every rank runs the same test cases
// in the same order. Before a branch only some ranks take (if (rank == 0)),
// ask for the groups first.
//
// They live until the process exits: function-local statics, destroyed after
// main() returned, i.e. after catch_mpi_main's MPI_Finalize. That is safe as
// long as no operation is in flight when MPI_Finalize runs (every test waits
// for what it starts, and destroys what it duplicated from these groups
// before returning): the communicators' threads are then idle, and
// destroying a communicator afterwards only runs MPI_Finalized on its thread
// (MpiCommunicator skips MPI_Comm_free once MPI is finalised; MPI allows
// MPI_Finalized at any time) and joins it.

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include <catch2/catch.hpp>

#include "core/status.h"
#include "topology/process_grid.h"
#include "worker/comm/communicator.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/process_groups.h"

namespace dslaunch::worker::comm::testing {

// The world's size, as MPI itself sees it (the groups are built from it).
inline int world_size() {
  static const int size = [] {
    int value = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &value);
    return value;
  }();
  return size;
}

// The groups of `shape` over the world, with default CommOptions (waits
// without a timeout, as MPI's blocking collectives did). Collective on the
// first call for each shape; aborts the test binary if creation fails, since
// the ranks could not go on in step.
inline ProcessGroups& groups_of(topology::GridShape shape) {
  static std::map<std::tuple<int, int, int>, std::unique_ptr<ProcessGroups>> cache;
  std::unique_ptr<ProcessGroups>& slot = cache[{shape.pipeline, shape.data, shape.tensor}];
  if (!slot) {
    auto created = create_mpi_process_groups(shape, CommOptions{});
    if (!created.ok()) {
      std::fprintf(stderr, "test_groups: creating the process groups (%d, %d, %d) failed: %s\n",
                   shape.pipeline, shape.data, shape.tensor, created.status().message().c_str());
      std::abort();
    }
    slot = std::move(created.value());
  }
  return *slot;
}

// The whole world in one data group: data() and world() hold every rank.
inline ProcessGroups& world_groups() { return groups_of({1, world_size(), 1}); }

// A data group of this rank alone (the tensor axis spans the world): what
// MPI_COMM_SELF was to these tests. Collective on first use, like the others.
inline Communicator& solo_data_comm() { return groups_of({1, 1, world_size()}).data(); }

inline int world_rank() { return world_groups().rank(); }

// The whole world in one data group, and a barrier over every rank of it.
inline Communicator& world_data() { return world_groups().data(); }
inline core::Status world_barrier() { return world_groups().world().barrier()->wait(); }

}  // namespace dslaunch::worker::comm::testing

// A status (of a collective, most often) must be ok; on failure the test
// stops with its message.
#define REQUIRE_OK(expression)                                       \
  do {                                                               \
    const ::dslaunch::core::Status require_ok_status = (expression); \
    INFO("status: " << require_ok_status.message());                 \
    REQUIRE(require_ok_status.ok());                                 \
  } while (false)
