#pragma once

#include <chrono>
#include <memory>

#include "core/status.h"
#include "topology/process_grid.h"
#include "worker/comm/process_groups.h"

namespace dslaunch::worker::comm {

struct CommOptions {
  // Every communicator's: fault_tolerance.collective_timeout and what a rank
  // does when a collective passes it.
  WaitPolicy wait;
  // How long a stream sleeps between tests of sends and receives in flight
  // when none completed (see MpiStream).
  std::chrono::microseconds poll_interval{kDefaultPollInterval};
  static constexpr std::chrono::microseconds kDefaultPollInterval{20};
};

// The process groups of `shape` over MPI_COMM_WORLD, each communicator with
// its own MpiStream. Collective over the world: every rank calls it with the same shape.
// Fails, on every rank and before any communication, when MPI is not
// initialised, an axis is smaller than 1 or the world's size is not
// pipeline·data·tensor.
core::StatusOr<std::unique_ptr<ProcessGroups>> create_mpi_process_groups(
    topology::GridShape shape, const CommOptions& options);

}  // namespace dslaunch::worker::comm
