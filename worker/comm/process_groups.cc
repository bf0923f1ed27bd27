#include "worker/comm/process_groups.h"

#include <utility>

namespace dslaunch::worker::comm {

std::string_view axis_name(Axis axis) {
  switch (axis) {
    case Axis::world:
      return "world";
    case Axis::pipeline:
      return "pipeline";
    case Axis::data:
      return "data";
    case Axis::tensor:
      return "tensor";
  }
  return "unknown";
}

std::optional<Axis> parse_axis(std::string_view name) {
  if (name == "pipe") return Axis::pipeline;
  if (name == "model") return Axis::tensor;
  for (Axis axis : {Axis::world, Axis::pipeline, Axis::data, Axis::tensor}) {
    if (axis_name(axis) == name) return axis;
  }
  return std::nullopt;
}

ProcessGroups::ProcessGroups(topology::GridShape shape, int rank,
                             std::unique_ptr<Transport> transport,
                             std::array<std::unique_ptr<Communicator>, 4> by_axis)
    : grid_(shape), rank_(rank), transport_(std::move(transport)), by_axis_(std::move(by_axis)) {}

ProcessGroups::~ProcessGroups() {
  // Groups before the world (they were split from it), all before the transport.
  for (Axis axis : {Axis::tensor, Axis::data, Axis::pipeline, Axis::world}) {
    by_axis_[static_cast<int>(axis)].reset();
  }
}

}  // namespace dslaunch::worker::comm
