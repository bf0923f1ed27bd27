#include "topology/placement.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string_view>
#include <utility>

namespace dslaunch::topology {
namespace {

// The ranks one host holds: whole tensor groups [whole_begin, whole_end),
// then its share [straddle_begin, straddle_end) of the groups that fit on no
// single host. Every whole-group rank is below every straddling rank, so the
// two ranges in turn are the host's ranks in increasing order.
struct HostRanks {
  int whole_begin = 0;
  int whole_end = 0;
  int straddle_begin = 0;
  int straddle_end = 0;
  int size() const { return whole_end - whole_begin + straddle_end - straddle_begin; }
  int rank(int local_rank) const {
    const int whole = whole_end - whole_begin;
    return local_rank < whole ? whole_begin + local_rank : straddle_begin + local_rank - whole;
  }
};

// (GPU index, its position in gpu_islands), sorted by GPU. Sorted pairs rather
// than a table indexed by GPU, so that a mistyped huge index costs nothing.
std::vector<std::pair<int, int>> islands_by_gpu(const HostTopology& topology) {
  std::vector<std::pair<int, int>> by_gpu;
  for (size_t i = 0; i < topology.gpu_islands.size(); ++i) {
    for (int gpu : topology.gpu_islands[i]) by_gpu.emplace_back(gpu, static_cast<int>(i));
  }
  std::sort(by_gpu.begin(), by_gpu.end());
  return by_gpu;
}

std::vector<std::string> topology_errors(const HostTopology& topology,
                                         const std::vector<std::pair<int, int>>& by_gpu) {
  std::vector<std::string> errors;
  if (topology.cores < 1) {
    errors.push_back("topology: cores is " + std::to_string(topology.cores) +
                     "; a host needs at least 1 core");
  }
  if (topology.numa_nodes < 1 || (topology.cores >= 1 && topology.numa_nodes > topology.cores)) {
    errors.push_back("topology: numa_nodes is " + std::to_string(topology.numa_nodes) +
                     "; it must be between 1 and cores (" + std::to_string(topology.cores) + ")");
  }
  for (size_t i = 0; i < by_gpu.size(); ++i) {
    const int gpu = by_gpu[i].first;
    if (gpu < 0) {
      errors.push_back("topology: gpu_islands lists GPU " + std::to_string(gpu) +
                       "; GPU indices start at 0");
    } else if (i > 0 && by_gpu[i - 1].first == gpu) {
      errors.push_back("topology: gpu_islands lists GPU " + std::to_string(gpu) +
                       " more than once; each GPU belongs to one island");
    }
  }
  for (size_t gpu = 0; gpu < topology.gpu_numa_node.size(); ++gpu) {
    const int node = topology.gpu_numa_node[gpu];
    if (node < -1 || node >= topology.numa_nodes) {
      errors.push_back("topology: gpu_numa_node puts GPU " + std::to_string(gpu) + " on node " +
                       std::to_string(node) + ", but there are " +
                       std::to_string(topology.numa_nodes) + " NUMA nodes (-1 means unknown)");
    }
  }
  return errors;
}

// Assigns ranks to hosts. Tensor groups (tensor_size consecutive ranks) go
// whole, in rank order, to hosts in host order, floor(slots / tensor_size) per
// host; so pipeline stages, which are runs of consecutive groups, fill
// consecutive hosts. The groups left over take the hosts' remaining slots in
// host order, and each of them crosses hosts.
std::vector<HostRanks> assign_hosts(const std::vector<HostSlots>& hosts, int tensor_size) {
  std::vector<HostRanks> assigned(hosts.size());
  int next_rank = 0;
  for (size_t h = 0; h < hosts.size(); ++h) {
    const int whole = static_cast<int>(hosts[h].slots.size()) / tensor_size * tensor_size;
    assigned[h].whole_begin = next_rank;
    assigned[h].whole_end = next_rank + whole;
    next_rank += whole;
  }
  for (size_t h = 0; h < hosts.size(); ++h) {
    assigned[h].straddle_begin = next_rank;
    next_rank += static_cast<int>(hosts[h].slots.size()) % tensor_size;
    assigned[h].straddle_end = next_rank;
  }
  return assigned;
}

std::string join_ranks(int first, int count) {
  std::string text = "[";
  for (int i = 0; i < count; ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(first + i);
  }
  return text + "]";
}

std::vector<std::string> straddle_warnings(const std::vector<HostSlots>& hosts,
                                           const std::vector<HostRanks>& assigned, int tensor_size) {
  // Hosts of each straddling group, in host order: the straddling ranks were
  // dealt out host by host, so a group's hosts are consecutive in that walk.
  std::vector<std::pair<int, std::vector<size_t>>> groups;  // first rank, hosts
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int rank = assigned[h].straddle_begin; rank < assigned[h].straddle_end; ++rank) {
      const int first = rank - rank % tensor_size;
      if (groups.empty() || groups.back().first != first) groups.push_back({first, {}});
      auto& group_hosts = groups.back().second;
      if (group_hosts.empty() || group_hosts.back() != h) group_hosts.push_back(h);
    }
  }
  std::vector<std::string> warnings;
  warnings.reserve(groups.size());
  for (const auto& [first, group_hosts] : groups) {
    std::string names;
    for (size_t i = 0; i < group_hosts.size(); ++i) {
      if (i > 0) names += i + 1 == group_hosts.size() ? " and " : ", ";
      names += hosts[group_hosts[i]].host;
    }
    warnings.push_back("tensor-parallel group " + join_ranks(first, tensor_size) + " spans hosts " +
                       names + ": its all-reduces will cross the network");
  }
  return warnings;
}

// Scratch for order_slots, reused across hosts so that large clusters cost no
// per-host allocations.
struct SlotScratch {
  std::vector<int> island_key;  // per gpu_islands entry: its smallest slot on this host, or -1
  std::vector<std::pair<int, int>> keyed;  // (island key, slot)
  std::vector<int> rest;
};

// The host's slots in the order its ranks take them (increasing local rank).
// Islands are the host's slots grouped by gpu_islands, a slot in no listed
// island forming one alone, ordered by their smallest slot. Each island takes
// as many of the host's whole tensor groups as fit in it, in island order;
// the groups that fit in no island's remainder, then the pieces of
// host-straddling groups, take the slots left, in island order. Packing groups
// of one size first-fit this way keeps the largest possible number of them
// inside an island.
void order_slots(const std::vector<int>& slots, const std::vector<std::pair<int, int>>& by_gpu,
                 int tensor_size, int whole_groups, SlotScratch& scratch, std::vector<int>& order) {
  if (by_gpu.empty()) {
    order = slots;
    return;
  }
  const auto island_at = [&](int slot) {
    const auto found = std::lower_bound(by_gpu.begin(), by_gpu.end(), std::pair{slot, -1});
    return found != by_gpu.end() && found->first == slot ? found->second : -1;
  };
  auto& keyed = scratch.keyed;
  keyed.clear();
  // Slots are sorted, so the first slot seen of an island is its smallest.
  for (int slot : slots) {
    const int island = island_at(slot);
    int key = slot;  // a slot in no listed island is an island alone
    if (island >= 0) {
      if (scratch.island_key[island] < 0) scratch.island_key[island] = slot;
      key = scratch.island_key[island];
    }
    keyed.emplace_back(key, slot);
  }
  for (int slot : slots) {
    const int island = island_at(slot);
    if (island >= 0) scratch.island_key[island] = -1;
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  order.clear();
  scratch.rest.clear();
  int groups_left = whole_groups;
  for (size_t begin = 0; begin < keyed.size();) {
    size_t end = begin;
    while (end < keyed.size() && keyed[end].first == keyed[begin].first) ++end;
    const int fit = std::min(static_cast<int>(end - begin) / tensor_size, groups_left);
    groups_left -= fit;
    for (size_t i = begin; i < end; ++i) {
      const bool in_group = i < begin + static_cast<size_t>(fit) * tensor_size;
      (in_group ? order : scratch.rest).push_back(keyed[i].second);
    }
    begin = end;
  }
  order.insert(order.end(), scratch.rest.begin(), scratch.rest.end());
}

int first_core_of_node(const HostTopology& topology, int node) {
  return static_cast<int>(static_cast<int64_t>(node) * topology.cores / topology.numa_nodes);
}

int node_of_core(const HostTopology& topology, int core) {
  // The largest node n with n * cores / numa_nodes <= core.
  return static_cast<int>(((static_cast<int64_t>(core) + 1) * topology.numa_nodes - 1) /
                          topology.cores);
}

// The `index`-th of `count` even, contiguous shares of cores [first, first + size);
// with more ranks than cores, ranks take the cores round-robin.
void share_cores(int first, int size, int index, int count, std::vector<int>& cores) {
  if (count > size) {
    cores.assign(1, first + index % size);
    return;
  }
  const int begin = static_cast<int>(static_cast<int64_t>(index) * size / count);
  const int end = static_cast<int>(static_cast<int64_t>(index + 1) * size / count);
  cores.resize(end - begin);
  for (int i = begin; i < end; ++i) cores[i - begin] = first + i;
}

// The NUMA node of a GPU: the hint's, else spread evenly in GPU order.
int node_of_gpu(const HostTopology& topology, int gpu, int gpus_per_host) {
  if (static_cast<size_t>(gpu) < topology.gpu_numa_node.size() &&
      topology.gpu_numa_node[gpu] >= 0) {
    return topology.gpu_numa_node[gpu];
  }
  // A GPU missing from gpu_islands may have an index past their count; it
  // goes on the last node rather than past it.
  const int64_t spread = static_cast<int64_t>(gpu) * topology.numa_nodes / gpus_per_host;
  return static_cast<int>(std::min<int64_t>(spread, topology.numa_nodes - 1));
}

void append_int(std::string& out, int value) {
  char buffer[16];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

}  // namespace

Placement place_ranks(const ProcessGrid& grid, const std::vector<HostSlots>& hosts,
                      const HostTopology& topology, DeviceKind device) {
  Placement placement;
  const std::vector<std::pair<int, int>> by_gpu = islands_by_gpu(topology);
  placement.errors = topology_errors(topology, by_gpu);
  int64_t slots = 0;
  for (const auto& host : hosts) slots += static_cast<int64_t>(host.slots.size());
  if (slots != grid.world_size()) {
    const GridShape& shape = grid.shape();
    placement.errors.push_back(
        "the grid has " + std::to_string(grid.world_size()) + " ranks (pipeline " +
        std::to_string(shape.pipeline) + " x data " + std::to_string(shape.data) + " x tensor " +
        std::to_string(shape.tensor) + ") but " + std::to_string(slots) +
        " slots are selected; each slot takes exactly one rank, so change the parallel sizes or "
        "the hosts");
  }
  for (const auto& host : hosts) {
    for (size_t i = 0; i < host.slots.size(); ++i) {
      if (host.slots[i] < 0 || (i > 0 && host.slots[i] <= host.slots[i - 1])) {
        placement.errors.push_back("host " + host.host +
                                   ": slots must be distinct, non-negative and in increasing "
                                   "order");
        break;
      }
    }
    if (host.total_slots > 0 && !host.slots.empty() && host.slots.back() >= host.total_slots) {
      placement.errors.push_back("host " + host.host + ": slot " +
                                 std::to_string(host.slots.back()) + " is past the host's " +
                                 std::to_string(host.total_slots) + " slots");
    }
  }
  if (!placement.errors.empty()) return placement;

  const int tensor_size = grid.shape().tensor;
  const std::vector<HostRanks> assigned = assign_hosts(hosts, tensor_size);
  placement.warnings = straddle_warnings(hosts, assigned, tensor_size);

  // CPU rank slots are not GPUs: islands do not apply to them.
  const std::vector<std::pair<int, int>> no_islands;
  // The GPUs the islands describe: the highest index listed + 1, since a hint may
  // leave some GPUs out (they are islands alone). by_gpu is sorted and, past the
  // checks above, non-negative.
  const int listed_gpus =
      by_gpu.empty() ? 0
                     : static_cast<int>(std::min<int64_t>(by_gpu.back().first + int64_t{1},
                                                          std::numeric_limits<int>::max()));

  // Scratch reused across hosts, so that large clusters cost no per-host allocations.
  SlotScratch scratch;
  scratch.island_key.assign(topology.gpu_islands.size(), -1);
  std::vector<int> order;
  std::vector<int> node_of_slot;
  std::vector<int> ranks_on_node(topology.numa_nodes);
  std::vector<int> index_on_node;

  placement.ranks.resize(grid.world_size());
  for (size_t h = 0; h < hosts.size(); ++h) {
    const HostSlots& host = hosts[h];
    const HostRanks& ranks = assigned[h];
    const int local_world_size = ranks.size();
    if (local_world_size == 0) continue;
    order_slots(host.slots, device == DeviceKind::kCuda ? by_gpu : no_islands, tensor_size,
                (ranks.whole_end - ranks.whole_begin) / tensor_size, scratch, order);

    // For kCuda, the ranks on one NUMA node split its cores in GPU order.
    if (device == DeviceKind::kCuda) {
      // The host's GPU count, which must not depend on which GPUs were selected, or
      // `include a:0,1` would move GPU 1 to another NUMA node: the most of what the
      // islands list, the host's slots before filters and its highest selected slot.
      const int gpus = std::max({listed_gpus, host.total_slots, host.slots.back() + 1});
      std::fill(ranks_on_node.begin(), ranks_on_node.end(), 0);
      node_of_slot.resize(host.slots.size());
      index_on_node.resize(host.slots.size());
      for (size_t i = 0; i < host.slots.size(); ++i) {
        node_of_slot[i] = node_of_gpu(topology, host.slots[i], gpus);
        index_on_node[i] = ranks_on_node[node_of_slot[i]]++;
      }
    }

    for (int local_rank = 0; local_rank < local_world_size; ++local_rank) {
      const int rank = ranks.rank(local_rank);
      RankPlacement& placed = placement.ranks[rank];
      placed.rank = rank;
      placed.host = host.host;
      placed.slot = order[local_rank];
      placed.local_rank = local_rank;
      placed.local_world_size = local_world_size;
      placed.coord = grid.coord_of(rank);
      if (device == DeviceKind::kCuda) {
        placed.device = "cuda:" + std::to_string(placed.slot);
        // Slots are sorted and distinct: find the slot's position to get its node.
        const size_t i = std::lower_bound(host.slots.begin(), host.slots.end(), placed.slot) -
                         host.slots.begin();
        const int node = node_of_slot[i];
        const int first = first_core_of_node(topology, node);
        share_cores(first, first_core_of_node(topology, node + 1) - first, index_on_node[i],
                    ranks_on_node[node], placed.cpu_cores);
        placed.numa_node = node;
      } else {
        placed.device = "cpu";
        share_cores(0, topology.cores, local_rank, local_world_size, placed.cpu_cores);
        placed.numa_node = node_of_core(topology, placed.cpu_cores.front());
      }
    }
  }
  return placement;
}

std::string to_rankfile(const Placement& placement) {
  std::string out;
  out.reserve(placement.ranks.size() * 40);
  for (const RankPlacement& rank : placement.ranks) {
    out += "rank ";
    append_int(out, rank.rank);
    out += '=';
    out += rank.host;
    out += " slot=";
    // Runs of consecutive cores as ranges: "0-3,8".
    const std::vector<int>& cores = rank.cpu_cores;
    for (size_t i = 0; i < cores.size();) {
      size_t end = i + 1;
      while (end < cores.size() && cores[end] == cores[end - 1] + 1) ++end;
      if (i > 0) out += ',';
      append_int(out, cores[i]);
      if (end - i > 1) {
        out += '-';
        append_int(out, cores[end - 1]);
      }
      i = end;
    }
    out += '\n';
  }
  return out;
}

}  // namespace dslaunch::topology
