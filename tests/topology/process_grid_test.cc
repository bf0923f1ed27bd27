#include "topology/process_grid.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <catch2/catch.hpp>

using dslaunch::topology::GridCoord;
using dslaunch::topology::GridShape;
using dslaunch::topology::ProcessGrid;

namespace {

using Groups = std::vector<std::vector<int>>;

// The groups along one axis computed the slow, obvious way: bucket every rank
// by its coordinates on the two other axes.
Groups groups_by_brute_force(const ProcessGrid& grid, int GridCoord::*axis) {
  Groups groups;
  for (int rank = 0; rank < grid.world_size(); ++rank) {
    GridCoord key = grid.coord_of(rank);
    key.*axis = 0;
    const int first = grid.rank_of(key);
    auto found = std::find_if(groups.begin(), groups.end(),
                              [&](const std::vector<int>& g) { return g.front() == first; });
    if (found == groups.end()) {
      groups.push_back({rank});
    } else {
      found->push_back(rank);
    }
  }
  return groups;
}

}  // namespace

TEST_CASE("ranks number the grid with tensor fastest, then data, then pipeline") {
  // The numbering of DeepSpeed's PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2),
  // as its tests spell it out.
  const ProcessGrid grid(GridShape{.pipeline = 2, .data = 2, .tensor = 2});
  REQUIRE(grid.world_size() == 8);
  CHECK(grid.rank_of({.pipeline = 0, .data = 0, .tensor = 0}) == 0);
  CHECK(grid.rank_of({.pipeline = 0, .data = 0, .tensor = 1}) == 1);
  CHECK(grid.rank_of({.pipeline = 0, .data = 1, .tensor = 0}) == 2);
  CHECK(grid.rank_of({.pipeline = 0, .data = 1, .tensor = 1}) == 3);
  CHECK(grid.rank_of({.pipeline = 1, .data = 0, .tensor = 0}) == 4);
  CHECK(grid.rank_of({.pipeline = 1, .data = 0, .tensor = 1}) == 5);
  CHECK(grid.rank_of({.pipeline = 1, .data = 1, .tensor = 0}) == 6);
  CHECK(grid.rank_of({.pipeline = 1, .data = 1, .tensor = 1}) == 7);
  CHECK(grid.coord_of(6) == GridCoord{.pipeline = 1, .data = 1, .tensor = 0});
  CHECK(grid.coord_of(3) == GridCoord{.pipeline = 0, .data = 1, .tensor = 1});
}

TEST_CASE("a 2x2x2 grid has DeepSpeed's axis communicator lists") {
  // PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2).get_axis_comm_lists(axis);
  // the pipe lists are the example in DeepSpeed's docstring.
  const ProcessGrid grid(GridShape{.pipeline = 2, .data = 2, .tensor = 2});
  CHECK(grid.tensor_groups() == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.data_groups() == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.pipeline_groups() == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
}

TEST_CASE("16 ranks with tensor 2 and pipeline 4 have Megatron's documented groups") {
  // The example in Megatron-LM's initialize_model_parallel docstring.
  const ProcessGrid grid(GridShape{.pipeline = 4, .data = 2, .tensor = 2});
  CHECK(grid.tensor_groups() ==
        Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  CHECK(grid.data_groups() ==
        Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(grid.pipeline_groups() == Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
}

TEST_CASE("a grid with unequal axes groups each axis by its own stride") {
  const ProcessGrid grid(GridShape{.pipeline = 2, .data = 3, .tensor = 2});
  REQUIRE(grid.world_size() == 12);
  CHECK(grid.tensor_groups() == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}});
  CHECK(grid.data_groups() == Groups{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}});
  CHECK(grid.pipeline_groups() == Groups{{0, 6}, {1, 7}, {2, 8}, {3, 9}, {4, 10}, {5, 11}});
  CHECK(grid.coord_of(9) == GridCoord{.pipeline = 1, .data = 1, .tensor = 1});
}

TEST_CASE("pipeline neighbours keep the data and tensor coordinates") {
  const ProcessGrid grid(GridShape{.pipeline = 3, .data = 2, .tensor = 2});
  CHECK(grid.previous_stage(0) == std::nullopt);
  CHECK(grid.next_stage(0) == 4);
  CHECK(grid.previous_stage(3) == std::nullopt);
  CHECK(grid.next_stage(3) == 7);
  CHECK(grid.previous_stage(6) == 2);
  CHECK(grid.next_stage(6) == 10);
  CHECK(grid.previous_stage(11) == 7);
  CHECK(grid.next_stage(11) == std::nullopt);
  CHECK(grid.next_stage(8) == std::nullopt);
}

TEST_CASE("a single rank is alone in every group and has no pipeline neighbours") {
  const ProcessGrid grid(GridShape{});
  CHECK(grid.world_size() == 1);
  CHECK(grid.tensor_groups() == Groups{{0}});
  CHECK(grid.data_groups() == Groups{{0}});
  CHECK(grid.pipeline_groups() == Groups{{0}});
  CHECK(grid.previous_stage(0) == std::nullopt);
  CHECK(grid.next_stage(0) == std::nullopt);
}

TEST_CASE("for every small shape the groups agree with a brute-force grouping") {
  for (int pipe = 1; pipe <= 5; ++pipe) {
    for (int data = 1; data <= 5; ++data) {
      for (int model = 1; model <= 5; ++model) {
        const ProcessGrid grid(GridShape{.pipeline = pipe, .data = data, .tensor = model});
        INFO("pipe " << pipe << ", data " << data << ", model " << model);
        REQUIRE(grid.world_size() == pipe * data * model);
        for (int rank = 0; rank < grid.world_size(); ++rank) {
          const GridCoord coord = grid.coord_of(rank);
          REQUIRE(grid.rank_of(coord) == rank);
          REQUIRE(coord.pipeline < pipe);
          REQUIRE(coord.data < data);
          REQUIRE(coord.tensor < model);
          const auto previous = grid.previous_stage(rank);
          REQUIRE(previous.has_value() == (coord.pipeline > 0));
          if (previous) {
            GridCoord expected = coord;
            --expected.pipeline;
            REQUIRE(grid.coord_of(*previous) == expected);
          }
          const auto next = grid.next_stage(rank);
          REQUIRE(next.has_value() == (coord.pipeline + 1 < pipe));
          if (next) {
            GridCoord expected = coord;
            ++expected.pipeline;
            REQUIRE(grid.coord_of(*next) == expected);
          }
        }
        // Brute force buckets ranks in increasing order and opens buckets by
        // first rank, so it yields exactly the documented ordering.
        REQUIRE(grid.pipeline_groups() == groups_by_brute_force(grid, &GridCoord::pipeline));
        REQUIRE(grid.data_groups() == groups_by_brute_force(grid, &GridCoord::data));
        REQUIRE(grid.tensor_groups() == groups_by_brute_force(grid, &GridCoord::tensor));
        for (const Groups& groups : {grid.pipeline_groups(), grid.data_groups(), grid.tensor_groups()}) {
          std::vector<int> seen(grid.world_size(), 0);
          for (const auto& group : groups) {
            for (int rank : group) ++seen[rank];
          }
          REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
        }
      }
    }
  }
}

TEST_CASE("a 131072-rank grid has the expected number and size of groups") {
  const ProcessGrid grid(GridShape{.pipeline = 16, .data = 1024, .tensor = 8});
  REQUIRE(grid.world_size() == 131072);
  const auto model = grid.tensor_groups();
  REQUIRE(model.size() == 16384);
  CHECK(model.back() ==
        std::vector<int>{131064, 131065, 131066, 131067, 131068, 131069, 131070, 131071});
  const auto data = grid.data_groups();
  REQUIRE(data.size() == 128);
  CHECK(data[9].size() == 1024);
  CHECK(data[9].front() == 8192 + 1);
  CHECK(data[9].back() == 8192 + 1023 * 8 + 1);
  const auto pipe = grid.pipeline_groups();
  REQUIRE(pipe.size() == 8192);
  CHECK(pipe[8191] == std::vector<int>{8191, 16383, 24575, 32767, 40959, 49151, 57343, 65535, 73727,
                                       81919, 90111, 98303, 106495, 114687, 122879, 131071});
}
