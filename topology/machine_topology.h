#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::topology {

// This machine's CPU and memory layout as hwloc sees it (cgroup and cpuset
// restrictions applied, so the counts are what this process may use).
struct MachineTopology {
  std::string cpu_model;  // empty when hwloc does not know it
  int packages = 0;
  int numa_nodes = 0;
  int cores = 0;
  int hardware_threads = 0;
  int64_t memory_bytes = 0;  // physical memory of the machine
  std::string error;         // set, with the counts left at 0, when hwloc failed
};

MachineTopology probe_machine_topology();

}  // namespace dslaunch::topology
