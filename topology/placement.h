#pragma once

#include <string>
#include <vector>

#include "topology/host_filter.h"
#include "topology/process_grid.h"

namespace dslaunch::topology {

enum class DeviceKind { kCpu, kCuda };

// What is known about the inside of each host (all hosts are assumed alike,
// as in a homogeneous cluster). Comes from the spec's topology hint, or from
// this machine (hwloc, `nvidia-smi topo -m`) when the spec gives none.
struct HostTopology {
  int cores = 1;       // physical cores per host
  int numa_nodes = 1;  // cores are split evenly, in order, across NUMA nodes
  // GPUs that share the fastest links (an NVLink/NVSwitch island, or a PCIe
  // switch), as lists of GPU indices. Empty: all GPUs are equally linked.
  std::vector<std::vector<int>> gpu_islands;
  // NUMA node of each GPU index; empty (or -1): GPU g of G sits on node
  // g * numa_nodes / G, where G, the host's GPU count, is the largest of the
  // highest GPU index in gpu_islands + 1, the host's total_slots and its
  // highest selected slot + 1 (so it does not change with the filters).
  std::vector<int> gpu_numa_node;
};

struct RankPlacement {
  int rank = 0;
  std::string host;
  int slot = 0;  // GPU index for kCuda; the CPU rank slot for kCpu
  int local_rank = 0;
  int local_world_size = 0;
  GridCoord coord;
  std::string device;          // "cuda:<slot>" or "cpu"
  std::vector<int> cpu_cores;  // cores the rank is bound to, ascending
  int numa_node = 0;
};

struct Placement {
  std::vector<RankPlacement> ranks;   // indexed by rank
  std::vector<std::string> warnings;  // e.g. a tensor group that must cross hosts
  std::vector<std::string> errors;    // e.g. fewer slots than ranks
};

// Places every rank of `grid` on the selected hosts:
//  - a tensor-parallel (model) group never crosses a host when it fits in one,
//    and inside a host takes slots of one GPU island when one is big enough;
//  - pipeline stages spread across hosts (consecutive stages on consecutive
//    hosts when stages span hosts);
//  - data-parallel replicas fill the rest.
// Every selected slot is used exactly once; world size must equal the number
// of slots. Each rank gets an even, contiguous share of its host's cores, on
// its GPU's NUMA node for kCuda. Deterministic; pure.
Placement place_ranks(const ProcessGrid& grid, const std::vector<HostSlots>& hosts,
                      const HostTopology& topology, DeviceKind device);

// The placement as an Open MPI rankfile (`rank R=HOST slot=CORES`, logical
// core numbers), for `mpirun --rankfile`.
std::string to_rankfile(const Placement& placement);

}  // namespace dslaunch::topology
