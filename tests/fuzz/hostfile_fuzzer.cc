// libFuzzer target: hostfiles, include/exclude filters, Slurm node lists and
// tasks-per-node strings. Besides crashes and sanitizer reports, it checks
// the parsers' promises and traps when one is broken.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <set>
#include <string>

#include "topology/host_filter.h"
#include "topology/hostfile.h"
#include "topology/slurm_nodelist.h"

namespace {

void require(bool promise_kept) {
  if (!promise_kept) __builtin_trap();
}

void check_hostfile(const dslaunch::topology::ParsedHostfile& parsed) {
  std::set<std::string> names;
  int previous_line = 0;
  for (const auto& host : parsed.hosts) {
    require(host.slots >= 1 && host.slots <= dslaunch::topology::kMaxSlotsPerHost);
    require(dslaunch::topology::valid_host_name(host.host));
    require(host.line > previous_line);
    require(names.insert(host.host).second);
    previous_line = host.line;
  }
  require(!parsed.hosts.empty() || !parsed.errors.empty());
}

void check_selection(const std::vector<dslaunch::topology::HostfileEntry>& hosts,
                     const dslaunch::topology::ResourceSelection& selection) {
  if (!selection.errors.empty()) {
    require(selection.hosts.empty());
    return;
  }
  require(!selection.hosts.empty());
  size_t next = 0;  // selected hosts keep hostfile order
  int64_t world = 0;
  for (const auto& selected : selection.hosts) {
    while (next < hosts.size() && hosts[next].host != selected.host) ++next;
    require(next < hosts.size());
    require(!selected.slots.empty());
    require(selected.total_slots == hosts[next].slots);
    world += static_cast<int64_t>(selected.slots.size());
    for (size_t i = 0; i < selected.slots.size(); ++i) {
      require(selected.slots[i] >= 0 && selected.slots[i] < hosts[next].slots);
      require(i == 0 || selected.slots[i - 1] < selected.slots[i]);
    }
    ++next;
  }
  require(world <= dslaunch::topology::kMaxWorldSize);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const std::string include = input.ConsumeRandomLengthString(64);
  const std::string exclude = input.ConsumeBool() ? input.ConsumeRandomLengthString(64) : "";
  const int num_nodes = input.ConsumeIntegralInRange(-2, 8);
  const int num_gpus = input.ConsumeIntegralInRange(-2, 8);
  const std::string nodelist = input.ConsumeRandomLengthString(128);
  const std::string hostfile = input.ConsumeRemainingBytesAsString();

  const auto parsed = dslaunch::topology::parse_hostfile(hostfile);
  check_hostfile(parsed);
  check_selection(parsed.hosts, dslaunch::topology::select_resources(parsed.hosts, include, exclude,
                                                                     num_nodes, num_gpus));

  const auto expanded = dslaunch::topology::expand_nodelist(nodelist);
  require(!expanded.error.empty() || !expanded.hosts.empty());  // an empty list is an error
  std::set<std::string> nodes;
  for (const std::string& host : expanded.hosts) {
    require(dslaunch::topology::valid_host_name(host));
    require(nodes.insert(host).second);  // each node once
  }
  const auto tasks = dslaunch::topology::expand_tasks_per_node(nodelist);
  for (const int count : tasks.counts) {
    require(count >= 1 && count <= dslaunch::topology::kMaxSlotsPerHost);
  }
  return 0;
}
