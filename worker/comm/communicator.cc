#include "worker/comm/communicator.h"

#include <cstdint>

namespace dslaunch::worker::comm {

Blocks Blocks::consecutive(std::vector<int64_t> counts) {
  Blocks blocks;
  int64_t displacement = 0;
  for (const int64_t count : counts) {
    blocks.displacements.push_back(displacement);
    displacement += count;
  }
  blocks.counts = std::move(counts);
  return blocks;
}

std::string_view op_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kBarrier:
      return "barrier";
  }
  return "unknown";
}

int64_t CommStats::calls() const {
  int64_t total = 0;
  for (const Op& op : ops) total += op.calls;
  return total;
}

int64_t CommStats::bytes() const {
  int64_t total = 0;
  for (const Op& op : ops) total += op.bytes;
  return total;
}

core::Status wait_for(Work& work, std::string_view context) {
  return work.wait().with_context(context);
}

}  // namespace dslaunch::worker::comm
