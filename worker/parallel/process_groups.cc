#include "worker/parallel/process_groups.h"

#include <string>
#include <utility>

#include "worker/parallel/mpi_error.h"

namespace dslaunch::worker {
namespace {

std::string shape_text(const topology::GridShape& shape) {
  return "pipe " + std::to_string(shape.pipe) + " x data " + std::to_string(shape.data) +
         " x model " + std::to_string(shape.model);
}

// Splits `parent` so that each new communicator is one group along an axis:
// `color` numbers the group as its place in the grid's list of groups, `key`
// is the rank's place inside it (ranks in a group are ordered by world rank).
std::string split(MPI_Comm parent, int color, int key, MPI_Comm* out) {
  int rc = MPI_Comm_split(parent, color, key, out);
  if (rc != MPI_SUCCESS) return mpi_error_message("MPI_Comm_split", rc);
  rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return mpi_error_message("MPI_Comm_set_errhandler", rc);
  return {};
}

}  // namespace

std::string_view axis_name(Axis axis) {
  switch (axis) {
    case Axis::world:
      return "world";
    case Axis::pipe:
      return "pipe";
    case Axis::data:
      return "data";
    case Axis::model:
      return "model";
  }
  return "unknown";
}

std::optional<Axis> parse_axis(std::string_view name) {
  for (Axis axis : {Axis::world, Axis::pipe, Axis::data, Axis::model}) {
    if (axis_name(axis) == name) return axis;
  }
  return std::nullopt;
}

ProcessGroups::ProcessGroups(topology::GridShape shape, int rank) : grid_(shape), rank_(rank) {}

ProcessGroups::~ProcessGroups() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* comm : {&model_, &data_, &pipe_, &world_}) {
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  }
}

ProcessGroups::Created ProcessGroups::create(MPI_Comm world, topology::GridShape shape) {
  if (shape.pipe < 1 || shape.data < 1 || shape.model < 1) {
    return {nullptr, "every axis of the process grid must be at least 1, got " + shape_text(shape)};
  }
  int world_size = 0;
  int rank = 0;
  int rc = MPI_Comm_size(world, &world_size);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(world, &rank);
  if (rc != MPI_SUCCESS) return {nullptr, mpi_error_message("MPI_Comm_size/rank", rc)};
  const topology::ProcessGrid grid(shape);
  if (world_size != grid.world_size()) {
    return {nullptr, "the process grid " + shape_text(shape) + " needs " +
                         std::to_string(grid.world_size()) + " ranks, but the world has " +
                         std::to_string(world_size) + "; start " +
                         std::to_string(grid.world_size()) +
                         " ranks or change the tensor and pipeline sizes"};
  }

  // Owned from here on, so an early return frees whatever was made.
  std::unique_ptr<ProcessGroups> groups(new ProcessGroups(shape, rank));
  rc = MPI_Comm_dup(world, &groups->world_);
  if (rc != MPI_SUCCESS) return {nullptr, mpi_error_message("MPI_Comm_dup", rc)};
  rc = MPI_Comm_set_errhandler(groups->world_, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return {nullptr, mpi_error_message("MPI_Comm_set_errhandler", rc)};

  // The grid's group lists, as arithmetic: pipe groups are numbered by the
  // rank's place within its stage, data groups by (pipe, model), model groups
  // by (pipe, data); see topology::ProcessGrid.
  const topology::GridCoord c = grid.coord_of(rank);
  const int stage = shape.data * shape.model;
  std::string error = split(groups->world_, rank % stage, c.pipe, &groups->pipe_);
  if (error.empty()) {
    error = split(groups->world_, c.pipe * shape.model + c.model, c.data, &groups->data_);
  }
  if (error.empty()) {
    error = split(groups->world_, c.pipe * shape.data + c.data, c.model, &groups->model_);
  }
  if (!error.empty()) return {nullptr, error};
  return {std::move(groups), {}};
}

MPI_Comm ProcessGroups::communicator(Axis axis) const {
  switch (axis) {
    case Axis::world:
      return world_;
    case Axis::pipe:
      return pipe_;
    case Axis::data:
      return data_;
    case Axis::model:
      return model_;
  }
  return MPI_COMM_NULL;
}

int ProcessGroups::size(Axis axis) const {
  switch (axis) {
    case Axis::world:
      return grid_.world_size();
    case Axis::pipe:
      return grid_.shape().pipe;
    case Axis::data:
      return grid_.shape().data;
    case Axis::model:
      return grid_.shape().model;
  }
  return 0;
}

}  // namespace dslaunch::worker
