#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topology/hostfile.h"

namespace dslaunch::topology {

struct NodelistExpansion {
  std::vector<std::string> hosts;  // in list order
  std::string error;               // empty on success
};

// Expands a Slurm node list such as `node[01-03,07],gpu-a[1-2],login` into
// host names, keeping each range's zero padding (`node[08-10]` gives node08,
// node09, node10). Several bracket groups in one name multiply
// (`r[1-2]n[1-2]`). A malformed list, a name that is not a valid host name
// (valid_host_name) and a node listed twice (`node1,node[1-2]`) are errors
// naming the offending part.
NodelistExpansion expand_nodelist(std::string_view nodelist);

struct TasksPerNode {
  std::vector<int> counts;  // one per node
  std::string error;
};

// Expands SLURM_TASKS_PER_NODE, such as `2(x3),1` into {2, 2, 2, 1}. A count
// must be 1 to kMaxSlotsPerHost.
TasksPerNode expand_tasks_per_node(std::string_view tasks_per_node);

struct SlurmHosts {
  std::vector<HostfileEntry> hosts;  // slots = tasks on that node; line = 0
  // GPUs Slurm gave each node (SLURM_GPUS_ON_NODE, of the node dslaunch runs
  // on; allocations are alike per node); 0 when it gave none or did not say.
  int gpus_per_node = 0;
  std::string error;
};

// The hosts of the current Slurm allocation, from SLURM_JOB_NODELIST and
// SLURM_TASKS_PER_NODE read through `getenv` (injectable for tests).
// std::nullopt when SLURM_JOB_NODELIST is unset (not inside an allocation).
// The two variables must describe the same number of nodes.
std::optional<SlurmHosts> hosts_from_slurm_environment(
    const std::function<const char*(const char*)>& getenv);

}  // namespace dslaunch::topology
