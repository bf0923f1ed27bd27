#include "topology/process_grid.h"

namespace dslaunch::topology {

ProcessGrid::ProcessGrid(GridShape shape) : shape_(shape) {}

int ProcessGrid::world_size() const { return shape_.pipe * shape_.data * shape_.model; }

GridCoord ProcessGrid::coord_of(int rank) const {
  GridCoord coord;
  coord.model = rank % shape_.model;
  coord.data = rank / shape_.model % shape_.data;
  coord.pipe = rank / (shape_.model * shape_.data);
  return coord;
}

int ProcessGrid::rank_of(GridCoord coord) const {
  return (coord.pipe * shape_.data + coord.data) * shape_.model + coord.model;
}

// Each axis is a stride in the rank numbering (model 1, data M, pipe D*M), so
// a group is `first + i * stride`. Walking the other two axes with the outer one
// outermost yields the groups already sorted by their first rank.
std::vector<std::vector<int>> ProcessGrid::pipe_groups() const {
  const int stage = shape_.data * shape_.model;  // ranks per pipeline stage
  std::vector<std::vector<int>> groups(stage);
  for (int first = 0; first < stage; ++first) {
    groups[first].reserve(shape_.pipe);
    for (int p = 0; p < shape_.pipe; ++p) groups[first].push_back(first + p * stage);
  }
  return groups;
}

std::vector<std::vector<int>> ProcessGrid::data_groups() const {
  const int stage = shape_.data * shape_.model;
  std::vector<std::vector<int>> groups;
  groups.reserve(shape_.pipe * shape_.model);
  for (int p = 0; p < shape_.pipe; ++p) {
    for (int m = 0; m < shape_.model; ++m) {
      auto& group = groups.emplace_back();
      group.reserve(shape_.data);
      for (int d = 0; d < shape_.data; ++d) group.push_back(p * stage + d * shape_.model + m);
    }
  }
  return groups;
}

std::vector<std::vector<int>> ProcessGrid::model_groups() const {
  const int count = shape_.pipe * shape_.data;
  std::vector<std::vector<int>> groups(count);
  for (int g = 0; g < count; ++g) {
    groups[g].reserve(shape_.model);
    for (int m = 0; m < shape_.model; ++m) groups[g].push_back(g * shape_.model + m);
  }
  return groups;
}

std::optional<int> ProcessGrid::previous_stage(int rank) const {
  const int stage = shape_.data * shape_.model;
  if (rank < stage) return std::nullopt;
  return rank - stage;
}

std::optional<int> ProcessGrid::next_stage(int rank) const {
  const int stage = shape_.data * shape_.model;
  if (rank + stage >= world_size()) return std::nullopt;
  return rank + stage;
}

}  // namespace dslaunch::topology
