#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::topology {

struct GpuTopology {
  // GPUs joined by NVLink (`NV<n>` in the matrix), as connected components in
  // increasing GPU order. Without any NVLink, GPUs behind one PCIe switch
  // (`PIX` or `PXB`) form the islands; GPUs with neither are islands alone.
  std::vector<std::vector<int>> islands;
  std::vector<int> numa_node;  // per GPU, from the "NUMA Affinity" column; -1 if N/A
  std::string error;           // empty on success
};

// Parses the GPU-to-GPU matrix printed by `nvidia-smi topo -m` (GPU rows
// only; NIC rows and the legend are ignored). Pure; never throws.
GpuTopology parse_nvidia_smi_topo(std::string_view text);

}  // namespace dslaunch::topology
