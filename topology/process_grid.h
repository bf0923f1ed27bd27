#pragma once

#include <optional>
#include <vector>

namespace dslaunch::topology {

// Coordinates on the 3D grid. Axis order is `pipeline, data, tensor`,
// row-major with tensor fastest: the numbering of DeepSpeed's
// PipeModelDataParallelTopology and Megatron's default order, so
//   rank = (pipeline * data_size + data) * tensor_size + tensor.
struct GridCoord {
  int pipeline = 0;
  int data = 0;
  int tensor = 0;
  bool operator==(const GridCoord&) const = default;
};

struct GridShape {
  int pipeline = 1;
  int data = 1;
  int tensor = 1;
  bool operator==(const GridShape&) const = default;
};

// The process grid of a job: computed once from the shape, then handed to
// every rank. Immutable and cheap to copy; all methods are pure arithmetic.
// Preconditions: every axis size >= 1 (checked by the job-spec validation).
class ProcessGrid {
 public:
  explicit ProcessGrid(GridShape shape);

  const GridShape& shape() const { return shape_; }
  int world_size() const;

  GridCoord coord_of(int rank) const;  // 0 <= rank < world_size()
  int rank_of(GridCoord coord) const;

  // The groups along one axis: each inner list holds the ranks that differ
  // only in that axis, in increasing order; the lists are ordered by their
  // first rank. `tensor_groups` are the tensor-parallel groups, `data_groups`
  // the data-parallel (gradient all-reduce) groups, `pipeline_groups` the
  // pipelines. Each has world_size() / axis_size lists.
  std::vector<std::vector<int>> pipeline_groups() const;
  std::vector<std::vector<int>> data_groups() const;
  std::vector<std::vector<int>> tensor_groups() const;

  // The rank holding the previous / next pipeline stage with the same data
  // and tensor coordinates; std::nullopt at the first / last stage.
  std::optional<int> previous_stage(int rank) const;
  std::optional<int> next_stage(int rank) const;

 private:
  GridShape shape_;
};

}  // namespace dslaunch::topology
