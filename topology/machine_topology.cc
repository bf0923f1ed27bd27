#include "topology/machine_topology.h"

#include <hwloc.h>
#include <unistd.h>

namespace dslaunch::topology {
namespace {

int count_of(hwloc_topology_t topo, hwloc_obj_type_t type) {
  const int n = hwloc_get_nbobjs_by_type(topo, type);
  return n < 0 ? 0 : n;
}

}  // namespace

MachineTopology probe_machine_topology() {
  MachineTopology result;
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) {
    result.error = "hwloc_topology_init failed";
    return result;
  }
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    result.error = "hwloc_topology_load failed";
    return result;
  }
  result.packages = count_of(topo, HWLOC_OBJ_PACKAGE);
  result.numa_nodes = count_of(topo, HWLOC_OBJ_NUMANODE);
  result.cores = count_of(topo, HWLOC_OBJ_CORE);
  result.hardware_threads = count_of(topo, HWLOC_OBJ_PU);
  // Not hwloc's per-node totals: on VMs with hot-plugged memory they count
  // only the memory present at boot (4.8 of 24 GiB seen here).
  result.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (hwloc_obj_t package = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0)) {
    if (const char* model = hwloc_obj_get_info_by_name(package, "CPUModel")) {
      result.cpu_model = model;
    }
  }
  hwloc_topology_destroy(topo);
  return result;
}

}  // namespace dslaunch::topology
