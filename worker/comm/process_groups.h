#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string_view>

#include "worker/comm/communicator.h"
#include "topology/process_grid.h"

namespace dslaunch::worker::comm {

// A group of one rank: the whole world, or its group along one grid axis.
enum class Axis { world, pipeline, data, tensor };

// "world", "pipeline", "data", "tensor": the names the job spec and reports use.
std::string_view axis_name(Axis axis);
// Also takes the names older specs used: "pipe", and "model" for the tensor axis.
std::optional<Axis> parse_axis(std::string_view name);

// The communicators of one rank on the 3D process grid: one per axis, each
// holding exactly the ranks of the topology::ProcessGrid group containing
// this rank, ordered by world rank (so a rank's position in its data()
// group is its data coordinate), and one for the world. Owns them and the
// transport under them; destroy on every rank alike (freeing a group is
// collective).
class ProcessGroups {
 public:
  ProcessGroups(topology::GridShape shape, int rank, std::unique_ptr<Transport> transport,
                std::array<std::unique_ptr<Communicator>, 4> by_axis);
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  Communicator& world() const { return communicator(Axis::world); }
  Communicator& pipeline() const { return communicator(Axis::pipeline); }
  Communicator& data() const { return communicator(Axis::data); }
  Communicator& tensor() const { return communicator(Axis::tensor); }
  Communicator& communicator(Axis axis) const { return *by_axis_[static_cast<int>(axis)]; }

  int rank() const { return rank_; }  // in the world
  topology::GridCoord coord() const { return grid_.coord_of(rank_); }
  const topology::ProcessGrid& grid() const { return grid_; }
  Transport& transport() const { return *transport_; }

 private:
  topology::ProcessGrid grid_;
  int rank_;
  std::unique_ptr<Transport> transport_;  // destroyed after the communicators
  std::array<std::unique_ptr<Communicator>, 4> by_axis_;
};

}  // namespace dslaunch::worker::comm
