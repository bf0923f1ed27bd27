#include "topology/machine_topology.h"

#include <sched.h>

#include <fstream>
#include <string>

#include <catch2/catch.hpp>

TEST_CASE("machine topology counts what this process may run on") {
  const auto topo = dslaunch::topology::probe_machine_topology();
  REQUIRE(topo.error.empty());
  cpu_set_t allowed;
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  CHECK(topo.hardware_threads == CPU_COUNT(&allowed));
  CHECK(topo.cores >= 1);
  CHECK(topo.cores <= topo.hardware_threads);
  CHECK(topo.packages >= 1);
  CHECK(topo.numa_nodes >= 1);
}

TEST_CASE("machine memory is the kernel's MemTotal") {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long long kib = 0;
  while (meminfo >> key) {
    if (key == "MemTotal:") {
      meminfo >> kib;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  REQUIRE(kib > 0);
  CHECK(dslaunch::topology::probe_machine_topology().memory_bytes == kib * 1024);
}
