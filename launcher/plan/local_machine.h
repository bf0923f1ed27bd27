#pragma once

#include <cstdint>
#include <string>

#include "topology/gpu_topology.h"

namespace dslaunch::plan {

// What the planner knows about the machine it runs on; the default for every
// host's inside when the spec gives no topology hint.
struct LocalMachine {
  int cores = 1;
  int numa_nodes = 1;
  int64_t memory_bytes = 0;
  int gpus = 0;
  int64_t gpu_memory_bytes = 0;        // of GPU 0; 0 when unknown
  topology::GpuTopology gpu_topology;  // empty when nvidia-smi is absent
};

// Reads this machine with hwloc and, when it is installed, nvidia-smi.
LocalMachine probe_local_machine();

// Parses `nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits`
// (MiB per GPU, one per line): the GPU count and the first GPU's bytes.
// {0, 0} for text that is not such a list.
struct GpuMemoryQuery {
  int gpus = 0;
  int64_t first_gpu_bytes = 0;
};
GpuMemoryQuery parse_gpu_memory_query(const std::string& text);

}  // namespace dslaunch::plan
