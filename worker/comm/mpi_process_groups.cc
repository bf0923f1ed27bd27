#include "worker/comm/mpi_process_groups.h"

#include <mpi.h>

#include <string>
#include <utility>

#include <fmt/format.h>

#include "worker/comm/mpi_communicator.h"
#include "worker/comm/mpi_stream.h"
#include "worker/comm/mpi_status.h"

namespace dslaunch::worker::comm {
namespace {

std::string shape_text(const topology::GridShape& shape) {
  return fmt::format("pipeline {} x data {} x tensor {}", shape.pipeline, shape.data, shape.tensor);
}

// The group of `groups` that holds `rank`.
std::vector<int> group_of(const std::vector<std::vector<int>>& groups, int rank) {
  for (const std::vector<int>& group : groups) {
    for (const int member : group) {
      if (member == rank) return group;
    }
  }
  return {};
}

}  // namespace

core::StatusOr<std::unique_ptr<ProcessGroups>> create_mpi_process_groups(
    topology::GridShape shape, const CommOptions& options) {
  if (shape.pipeline < 1 || shape.data < 1 || shape.tensor < 1) {
    return core::invalid_argument("every axis of the process grid must be at least 1, got " +
                                  shape_text(shape));
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return core::failed_precondition("MPI is not initialised");

  auto transport = std::make_unique<MpiTransport>();
  int world_size = 0;
  int rank = 0;
  int code = MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (code == MPI_SUCCESS) code = MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (code != MPI_SUCCESS) return from_mpi(code, "MPI_Comm_size/rank");
  const topology::ProcessGrid grid(shape);
  if (world_size != grid.world_size()) {
    return core::invalid_argument(fmt::format(
        "the process grid {} needs {} ranks, but the world has {}; start {} ranks or change the "
        "tensor and pipeline sizes",
        shape_text(shape), grid.world_size(), world_size, grid.world_size()));
  }

  // A duplicate of the world, so this traffic never meets anyone else's; the
  // axis groups are split from it as the grid's group lists number them:
  // pipeline groups by the rank's place within its stage, data groups by
  // (pipeline, tensor), tensor groups by (pipeline, data).
  const topology::GridCoord c = grid.coord_of(rank);
  const int stage = shape.data * shape.tensor;
  struct Split {
    Axis axis;
    int color;
    int key;
    std::vector<int> members;
  };
  const Split splits[] = {
      {Axis::pipeline, rank % stage, c.pipeline, group_of(grid.pipeline_groups(), rank)},
      {Axis::data, c.pipeline * shape.tensor + c.tensor, c.data, group_of(grid.data_groups(), rank)},
      {Axis::tensor, c.pipeline * shape.data + c.data, c.tensor, group_of(grid.tensor_groups(), rank)},
  };
  std::array<MPI_Comm, 4> comms = {MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL};
  std::string failed_call;
  // On this thread: nothing else uses these communicators yet.
  code = [&] {
    failed_call = "MPI_Comm_dup";
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comms[static_cast<int>(Axis::world)]);
    for (const Split& split : splits) {
      if (rc != MPI_SUCCESS) break;
      failed_call = "MPI_Comm_split";
      rc = MPI_Comm_split(comms[static_cast<int>(Axis::world)], split.color, split.key,
                          &comms[static_cast<int>(split.axis)]);
    }
    for (MPI_Comm& comm : comms) {
      if (rc != MPI_SUCCESS) break;
      failed_call = "MPI_Comm_set_errhandler";
      rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    }
    if (rc != MPI_SUCCESS) {
      for (MPI_Comm& comm : comms) {
        if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
      }
    }
    return rc;
  }();
  if (code != MPI_SUCCESS) return from_mpi(code, failed_call);

  std::vector<int> everyone(world_size);
  for (int r = 0; r < world_size; ++r) everyone[r] = r;
  std::array<std::unique_ptr<Communicator>, 4> by_axis;
  by_axis[static_cast<int>(Axis::world)] = std::make_unique<MpiCommunicator>(
      *transport, comms[static_cast<int>(Axis::world)], "world", std::move(everyone),
      options.wait, options.poll_interval);
  for (const Split& split : splits) {
    by_axis[static_cast<int>(split.axis)] = std::make_unique<MpiCommunicator>(
        *transport, comms[static_cast<int>(split.axis)], std::string(axis_name(split.axis)),
        split.members, options.wait, options.poll_interval);
  }
  return std::make_unique<ProcessGroups>(shape, rank, std::move(transport), std::move(by_axis));
}

}  // namespace dslaunch::worker::comm
