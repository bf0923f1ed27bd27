#include "launcher/plan/local_machine.h"

#include <charconv>
#include <sstream>

#include "launcher/capture_output.h"
#include "topology/machine_topology.h"

namespace dslaunch::plan {

GpuMemoryQuery parse_gpu_memory_query(const std::string& text) {
  GpuMemoryQuery query;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    int64_t mib = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), mib);
    if (ec != std::errc() || end != line.data() + line.size()) return {};
    if (query.gpus == 0) query.first_gpu_bytes = mib * 1024 * 1024;
    ++query.gpus;
  }
  return query;
}

LocalMachine probe_local_machine() {
  LocalMachine machine;
  const topology::MachineTopology topo = topology::probe_machine_topology();
  machine.cores = topo.cores > 0 ? topo.cores : 1;
  machine.numa_nodes = topo.numa_nodes > 0 ? topo.numa_nodes : 1;
  machine.memory_bytes = topo.memory_bytes;

  const auto memory = launcher::capture_output(
      {"nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"});
  if (!memory || memory->exit_code != 0 || memory->timed_out) return machine;
  const GpuMemoryQuery query = parse_gpu_memory_query(memory->output);
  machine.gpus = query.gpus;
  machine.gpu_memory_bytes = query.first_gpu_bytes;
  const auto topo_matrix = launcher::capture_output({"nvidia-smi", "topo", "-m"});
  if (topo_matrix && topo_matrix->exit_code == 0 && !topo_matrix->timed_out) {
    machine.gpu_topology = topology::parse_nvidia_smi_topo(topo_matrix->output);
  }
  return machine;
}

}  // namespace dslaunch::plan
