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

int64_t wire_bytes(OpKind kind, int64_t bytes, int ranks) {
  if (ranks < 2 && kind != OpKind::kSend) return 0;
  const int64_t p = ranks;
  switch (kind) {
    case OpKind::kAllReduce:
      return 2 * (p - 1) * bytes / p;
    case OpKind::kReduceScatter:
    case OpKind::kAllToAll:
      return (p - 1) * bytes / p;
    case OpKind::kAllGather:
      return (p - 1) * bytes;
    case OpKind::kBroadcast:
    case OpKind::kSend:
      return bytes;
    case OpKind::kRecv:
    case OpKind::kBarrier:
      return 0;
  }
  return 0;
}

core::Status wait_for(Work& work, std::string_view context) {
  return work.wait().with_context(context);
}

}  // namespace dslaunch::worker::comm
