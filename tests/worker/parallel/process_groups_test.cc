// Runs under mpirun (see mpi_test): every rank executes every test case.
#include "worker/parallel/process_groups.h"

#include <mpi.h>

#include <vector>

#include <catch2/catch.hpp>

#include "topology/process_grid.h"

using dslaunch::topology::GridShape;
using dslaunch::topology::ProcessGrid;
using dslaunch::worker::Axis;
using dslaunch::worker::ProcessGroups;

namespace {

int world_rank() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = -1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Every grid shape with pipe·data·model == n, in a fixed order.
std::vector<GridShape> shapes_of(int n) {
  std::vector<GridShape> shapes;
  for (int pipe = 1; pipe <= n; ++pipe) {
    for (int data = 1; pipe * data <= n; ++data) {
      if (n % (pipe * data) == 0) shapes.push_back({pipe, data, n / (pipe * data)});
    }
  }
  return shapes;
}

// The world ranks of `comm`'s members, in their rank order within `comm`.
std::vector<int> members(MPI_Comm comm, int rank_in_world) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> ranks(size, -1);
  REQUIRE(MPI_Allgather(&rank_in_world, 1, MPI_INT, ranks.data(), 1, MPI_INT, comm) == MPI_SUCCESS);
  return ranks;
}

// The list among `groups` that contains `rank`.
std::vector<int> group_containing(const std::vector<std::vector<int>>& groups, int rank) {
  for (const auto& group : groups) {
    for (int member : group) {
      if (member == rank) return group;
    }
  }
  return {};
}

bool returns_errors(MPI_Comm comm) {
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(comm, &handler);
  const bool is_return = handler == MPI_ERRORS_RETURN;
  MPI_Errhandler_free(&handler);
  return is_return;
}

}  // namespace

TEST_CASE("Every grid shape of the world gets communicators matching the process grid's groups") {
  const int rank = world_rank();
  const int size = world_size();
  const auto shapes = shapes_of(size);
  CHECK(shapes.size() == (size == 2 ? 3u : 6u));
  for (const GridShape& shape : shapes) {
    INFO("shape pipe " << shape.pipe << " data " << shape.data << " model " << shape.model);
    auto created = ProcessGroups::create(MPI_COMM_WORLD, shape);
    REQUIRE(created.error.empty());
    REQUIRE(created.groups != nullptr);
    const ProcessGroups& groups = *created.groups;
    const ProcessGrid grid(shape);

    CHECK(groups.rank() == rank);
    CHECK(groups.grid().shape() == shape);
    CHECK(groups.coord() == grid.coord_of(rank));
    int compare = MPI_UNEQUAL;
    MPI_Comm_compare(groups.world(), MPI_COMM_WORLD, &compare);
    CHECK(compare == MPI_CONGRUENT);  // a duplicate, not the caller's communicator

    std::vector<int> everyone(size);
    for (int r = 0; r < size; ++r) everyone[r] = r;
    CHECK(members(groups.world(), rank) == everyone);
    CHECK(members(groups.pipe(), rank) == group_containing(grid.pipe_groups(), rank));
    CHECK(members(groups.data(), rank) == group_containing(grid.data_groups(), rank));
    CHECK(members(groups.model(), rank) == group_containing(grid.model_groups(), rank));

    // A rank's place in an axis communicator is its coordinate on that axis.
    int in_pipe = -1, in_data = -1, in_model = -1;
    MPI_Comm_rank(groups.pipe(), &in_pipe);
    MPI_Comm_rank(groups.data(), &in_data);
    MPI_Comm_rank(groups.model(), &in_model);
    CHECK(in_pipe == groups.coord().pipe);
    CHECK(in_data == groups.coord().data);
    CHECK(in_model == groups.coord().model);

    CHECK(groups.size(Axis::world) == size);
    CHECK(groups.size(Axis::pipe) == shape.pipe);
    CHECK(groups.size(Axis::data) == shape.data);
    CHECK(groups.size(Axis::model) == shape.model);
    for (Axis axis : {Axis::world, Axis::pipe, Axis::data, Axis::model}) {
      int comm_size = 0;
      MPI_Comm_size(groups.communicator(axis), &comm_size);
      CHECK(comm_size == groups.size(axis));
      CHECK(returns_errors(groups.communicator(axis)));
    }
    CHECK(groups.communicator(Axis::data) == groups.data());
  }
}

TEST_CASE("A grid that does not fit the world is refused on every rank") {
  const int size = world_size();
  auto created = ProcessGroups::create(MPI_COMM_WORLD, {1, size + 1, 1});
  CHECK(created.groups == nullptr);
  CHECK(created.error == "the process grid pipe 1 x data " + std::to_string(size + 1) +
                             " x model 1 needs " + std::to_string(size + 1) +
                             " ranks, but the world has " + std::to_string(size) + "; start " +
                             std::to_string(size + 1) +
                             " ranks or change the tensor and pipeline sizes");
}

TEST_CASE("A grid axis below 1 is refused") {
  auto created = ProcessGroups::create(MPI_COMM_WORLD, {0, world_size(), 1});
  CHECK(created.groups == nullptr);
  CHECK(created.error == "every axis of the process grid must be at least 1, got pipe 0 x data " +
                             std::to_string(world_size()) + " x model 1");
}

TEST_CASE("Communicators of one ProcessGroups carry independent collectives") {
  const int size = world_size();
  auto created = ProcessGroups::create(MPI_COMM_WORLD, {1, size / 2, 2});
  REQUIRE(created.error.empty());
  const ProcessGroups& groups = *created.groups;
  // Sum the world ranks over each model group, then over each data group.
  const int rank = groups.rank();
  int model_sum = 0, data_sum = 0;
  REQUIRE(MPI_Allreduce(&rank, &model_sum, 1, MPI_INT, MPI_SUM, groups.model()) == MPI_SUCCESS);
  REQUIRE(MPI_Allreduce(&rank, &data_sum, 1, MPI_INT, MPI_SUM, groups.data()) == MPI_SUCCESS);
  const int first_of_pair = rank - rank % 2;
  CHECK(model_sum == 2 * first_of_pair + 1);
  // Data groups hold the ranks of the same parity: m, m + 2, ...
  int expected = 0;
  for (int r = rank % 2; r < size; r += 2) expected += r;
  CHECK(data_sum == expected);
}

TEST_CASE("Axis names read back") {
  using dslaunch::worker::axis_name;
  using dslaunch::worker::parse_axis;
  CHECK(axis_name(Axis::world) == "world");
  CHECK(axis_name(Axis::pipe) == "pipe");
  CHECK(axis_name(Axis::data) == "data");
  CHECK(axis_name(Axis::model) == "model");
  for (Axis axis : {Axis::world, Axis::pipe, Axis::data, Axis::model}) {
    CHECK(parse_axis(axis_name(axis)) == axis);
  }
  CHECK(parse_axis("tensor") == std::nullopt);
  CHECK(parse_axis("") == std::nullopt);
}
