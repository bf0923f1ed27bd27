// Hostfiles and filters at scale: a 16,384-host x 8-slot hostfile, parsed and
// then filtered as DeepSpeed's launcher options would. Prints the median time
// of each step beside two references measured in the same run: the floor of
// finding the hostfile's line breaks, and the 100 ms that parse + filter must
// stay under (the bound the unit tests used to assert; timing belongs here, not
// in a test on a shared machine). parse_hostfile alone is plan_bench's floor.
//
//   bazel run //bench:hostfile_bench [-- RUNS]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "bench/median_time.h"

#include "topology/host_filter.h"
#include "topology/hostfile.h"

namespace {

using dslaunch::bench::median_ms;

using dslaunch::topology::HostfileEntry;
using dslaunch::topology::parse_hostfile;
using dslaunch::topology::ResourceSelection;
using dslaunch::topology::select_resources;

constexpr int kHosts = 16384;
constexpr int kSlots = 8;
constexpr double kTargetMs = 100;

// Selects and checks the number of hosts kept, so the work cannot be skipped.
void select_or_abort(const std::vector<HostfileEntry>& hosts, std::string_view include,
                     std::string_view exclude, int num_nodes, int num_gpus, size_t expected_hosts) {
  const ResourceSelection selection =
      select_resources(hosts, include, exclude, num_nodes, num_gpus);
  if (!selection.errors.empty() || selection.hosts.size() != expected_hosts) {
    std::cerr << "unexpected selection: "
              << (selection.errors.empty() ? "wrong host count" : selection.errors[0]) << "\n";
    std::abort();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  std::string text;
  std::string exclude;  // two slots of every other host: 8,192 filter elements
  std::string include;  // two slots of every host: 16,384 filter elements
  for (int h = 0; h < kHosts; ++h) {
    text += fmt::format("worker-{} slots={}\n", h, kSlots);
    if (h % 2 == 1) exclude += fmt::format("worker-{}:0,7@", h);
    include += fmt::format("worker-{}:1,2@", h);
  }
  exclude.pop_back();
  include.pop_back();

  const double lines_ms = median_ms(runs, [&] {
    size_t lines = 0;
    for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) {
      ++lines;
    }
    if (lines != kHosts) std::abort();
  });
  std::vector<HostfileEntry> hosts;
  const double parse_ms = median_ms(runs, [&] {
    auto parsed = parse_hostfile(text);
    if (!parsed.errors.empty() || parsed.hosts.size() != kHosts) std::abort();
    hosts = std::move(parsed.hosts);
  });
  const double all_ms = median_ms(runs, [&] { select_or_abort(hosts, "", "", -1, -1, kHosts); });
  const double exclude_ms =
      median_ms(runs, [&] { select_or_abort(hosts, "", exclude, -1, -1, kHosts); });
  const double include_ms =
      median_ms(runs, [&] { select_or_abort(hosts, include, "", -1, -1, kHosts); });
  const double counts_ms =
      median_ms(runs, [&] { select_or_abort(hosts, "", "", 16000, 4, 16000); });
  const double both_ms = median_ms(runs, [&] {
    const auto parsed = parse_hostfile(text);
    select_or_abort(parsed.hosts, "", exclude, -1, -1, kHosts);
  });

  std::cout << fmt::format(
      "hostfile and filters at scale: {} hosts x {} slots ({:.1f} MB of hostfile)\n"
      "median of {} runs on this machine\n\n",
      kHosts, kSlots, text.size() / 1e6, runs);
  std::cout << fmt::format("{:<58}{:>10}\n", "step", "ms");
  const auto row = [](const std::string& name, double ms) {
    std::cout << fmt::format("{:<58}{:>10.2f}\n", name, ms);
  };
  row("reference floor: find the line breaks only", lines_ms);
  row("parse_hostfile (plan_bench's floor)", parse_ms);
  row("select_resources: no filters (every slot)", all_ms);
  row(fmt::format("select_resources: exclude, {} elements", kHosts / 2), exclude_ms);
  row(fmt::format("select_resources: include, {} elements", kHosts), include_ms);
  row("select_resources: num_nodes 16000, num_gpus 4", counts_ms);
  row("parse_hostfile + exclude, as a launch does", both_ms);
  std::cout << fmt::format(
      "\ntarget: parse + filter under {:.0f} ms; took {:.2f} ms ({:.1f}x under the target), "
      "{:.1f}x the line-break floor\n",
      kTargetMs, both_ms, kTargetMs / both_ms, both_ms / lines_ms);
  return both_ms < kTargetMs ? 0 : 1;
}
