#include "topology/process_grid.h"

namespace dslaunch::topology {

ProcessGrid::ProcessGrid(GridShape shape) : shape_(shape) {}

int ProcessGrid::world_size() const { return shape_.pipeline * shape_.data * shape_.tensor; }

GridCoord ProcessGrid::coord_of(int rank) const {
  GridCoord coord;
  coord.tensor = rank % shape_.tensor;
  coord.data = rank / shape_.tensor % shape_.data;
  coord.pipeline = rank / (shape_.tensor * shape_.data);
  return coord;
}

int ProcessGrid::rank_of(GridCoord coord) const {
  return (coord.pipeline * shape_.data + coord.data) * shape_.tensor + coord.tensor;
}

// Each axis is a stride in the rank numbering (tensor 1, data T, pipeline D*T), so
// a group is `first + i * stride`. Walking the other two axes with the outer one
// outermost yields the groups already sorted by their first rank.
std::vector<std::vector<int>> ProcessGrid::pipeline_groups() const {
  const int stage = shape_.data * shape_.tensor;  // ranks per pipeline stage
  std::vector<std::vector<int>> groups(stage);
  for (int first = 0; first < stage; ++first) {
    groups[first].reserve(shape_.pipeline);
    for (int p = 0; p < shape_.pipeline; ++p) groups[first].push_back(first + p * stage);
  }
  return groups;
}

std::vector<std::vector<int>> ProcessGrid::data_groups() const {
  const int stage = shape_.data * shape_.tensor;
  std::vector<std::vector<int>> groups;
  groups.reserve(shape_.pipeline * shape_.tensor);
  for (int p = 0; p < shape_.pipeline; ++p) {
    for (int m = 0; m < shape_.tensor; ++m) {
      auto& group = groups.emplace_back();
      group.reserve(shape_.data);
      for (int d = 0; d < shape_.data; ++d) group.push_back(p * stage + d * shape_.tensor + m);
    }
  }
  return groups;
}

std::vector<std::vector<int>> ProcessGrid::tensor_groups() const {
  const int count = shape_.pipeline * shape_.data;
  std::vector<std::vector<int>> groups(count);
  for (int g = 0; g < count; ++g) {
    groups[g].reserve(shape_.tensor);
    for (int m = 0; m < shape_.tensor; ++m) groups[g].push_back(g * shape_.tensor + m);
  }
  return groups;
}

std::optional<int> ProcessGrid::previous_stage(int rank) const {
  const int stage = shape_.data * shape_.tensor;
  if (rank < stage) return std::nullopt;
  return rank - stage;
}

std::optional<int> ProcessGrid::next_stage(int rank) const {
  const int stage = shape_.data * shape_.tensor;
  if (rank + stage >= world_size()) return std::nullopt;
  return rank + stage;
}

}  // namespace dslaunch::topology
