#include "topology/placement.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "topology/host_filter.h"
#include "topology/hostfile.h"

using dslaunch::topology::DeviceKind;
using dslaunch::topology::GridCoord;
using dslaunch::topology::GridShape;
using dslaunch::topology::HostSlots;
using dslaunch::topology::HostTopology;
using dslaunch::topology::parse_hostfile;
using dslaunch::topology::place_ranks;
using dslaunch::topology::Placement;
using dslaunch::topology::ProcessGrid;
using dslaunch::topology::RankPlacement;
using dslaunch::topology::select_resources;
using dslaunch::topology::to_rankfile;

namespace {

HostSlots host_with_slots(std::string name, int slots) {
  HostSlots host{std::move(name), {}};
  for (int slot = 0; slot < slots; ++slot) host.slots.push_back(slot);
  return host;
}

HostTopology cores_and_nodes(int cores, int numa_nodes) {
  HostTopology topology;
  topology.cores = cores;
  topology.numa_nodes = numa_nodes;
  return topology;
}

// The fields a test states for one rank; rank, coord and local_world_size
// are checked separately where they matter.
struct Expected {
  std::string host;
  int slot;
  int local_rank;
  std::vector<int> cores;
  int numa_node;
};

void check_ranks(const Placement& placement, const std::vector<Expected>& expected) {
  REQUIRE(placement.errors.empty());
  REQUIRE(placement.ranks.size() == expected.size());
  for (size_t r = 0; r < expected.size(); ++r) {
    INFO("rank " << r);
    const RankPlacement& got = placement.ranks[r];
    CHECK(got.rank == static_cast<int>(r));
    CHECK(got.host == expected[r].host);
    CHECK(got.slot == expected[r].slot);
    CHECK(got.local_rank == expected[r].local_rank);
    CHECK(got.cpu_cores == expected[r].cores);
    CHECK(got.numa_node == expected[r].numa_node);
  }
}

std::vector<int> local_world_sizes(const Placement& placement) {
  std::vector<int> sizes;
  for (const auto& rank : placement.ranks) sizes.push_back(rank.local_world_size);
  return sizes;
}

}  // namespace

TEST_CASE("two 4-GPU hosts hold one pipeline stage each, GPUs bound to their NUMA node's cores") {
  const ProcessGrid grid(GridShape{.pipeline = 2, .data = 4, .tensor = 1});
  const auto placement = place_ranks(grid, {host_with_slots("a", 4), host_with_slots("b", 4)},
                                     cores_and_nodes(8, 2), DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 0, 0, {0, 1}, 0},
                             {"a", 1, 1, {2, 3}, 0},
                             {"a", 2, 2, {4, 5}, 1},
                             {"a", 3, 3, {6, 7}, 1},
                             {"b", 0, 0, {0, 1}, 0},
                             {"b", 1, 1, {2, 3}, 0},
                             {"b", 2, 2, {4, 5}, 1},
                             {"b", 3, 3, {6, 7}, 1},
                         });
  CHECK(placement.warnings.empty());
  CHECK(local_world_sizes(placement) == std::vector<int>(8, 4));
  CHECK(placement.ranks[5].device == "cuda:1");
  CHECK(placement.ranks[5].coord == GridCoord{.pipeline = 1, .data = 1, .tensor = 0});
  CHECK(to_rankfile(placement) ==
        "rank 0=a slot=0-1\n"
        "rank 1=a slot=2-3\n"
        "rank 2=a slot=4-5\n"
        "rank 3=a slot=6-7\n"
        "rank 4=b slot=0-1\n"
        "rank 5=b slot=2-3\n"
        "rank 6=b slot=4-5\n"
        "rank 7=b slot=6-7\n");
}

TEST_CASE("a world size that differs from the slot count is an error naming both") {
  const ProcessGrid grid(GridShape{.pipeline = 2, .data = 2, .tensor = 1});
  const auto placement = place_ranks(grid, {host_with_slots("a", 4), host_with_slots("b", 4)},
                                     cores_and_nodes(8, 2), DeviceKind::kCuda);
  REQUIRE(placement.errors.size() == 1);
  CHECK(placement.errors[0] ==
        "the grid has 4 ranks (pipeline 2 x data 2 x tensor 1) but 8 slots are selected; each slot "
        "takes exactly one rank, so change the parallel sizes or the hosts");
  CHECK(placement.ranks.empty());
  CHECK(placement.warnings.empty());
  CHECK(to_rankfile(placement).empty());
}

TEST_CASE("tensor groups of 2 stay on one host and stages fill consecutive hosts") {
  const ProcessGrid grid(GridShape{.pipeline = 3, .data = 2, .tensor = 2});
  const auto placement =
      place_ranks(grid, {host_with_slots("a", 4), host_with_slots("b", 4), host_with_slots("c", 4)},
                  cores_and_nodes(4, 1), DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 0, 0, {0}, 0},
                             {"a", 1, 1, {1}, 0},
                             {"a", 2, 2, {2}, 0},
                             {"a", 3, 3, {3}, 0},
                             {"b", 0, 0, {0}, 0},
                             {"b", 1, 1, {1}, 0},
                             {"b", 2, 2, {2}, 0},
                             {"b", 3, 3, {3}, 0},
                             {"c", 0, 0, {0}, 0},
                             {"c", 1, 1, {1}, 0},
                             {"c", 2, 2, {2}, 0},
                             {"c", 3, 3, {3}, 0},
                         });
  CHECK(placement.warnings.empty());
  CHECK(placement.ranks[7].coord == GridCoord{.pipeline = 1, .data = 1, .tensor = 1});
  CHECK(to_rankfile(placement) ==
        "rank 0=a slot=0\nrank 1=a slot=1\nrank 2=a slot=2\nrank 3=a slot=3\n"
        "rank 4=b slot=0\nrank 5=b slot=1\nrank 6=b slot=2\nrank 7=b slot=3\n"
        "rank 8=c slot=0\nrank 9=c slot=1\nrank 10=c slot=2\nrank 11=c slot=3\n");
}

TEST_CASE("a 6-GPU host leaves a tensor group of 4 to straddle it and the next host") {
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 3, .tensor = 4});
  const auto placement =
      place_ranks(grid, {host_with_slots("a", 4), host_with_slots("b", 6), host_with_slots("c", 2)},
                  cores_and_nodes(12, 2), DeviceKind::kCuda);
  // Whole groups first: [0..3] on a, [4..7] on b; [8..11] takes b's last two
  // GPUs and c's two. GPUs per host is the host's highest index + 1, so b's
  // GPUs 0-2 and c's GPU 0 sit on node 0.
  check_ranks(placement, {
                             {"a", 0, 0, {0, 1, 2}, 0},
                             {"a", 1, 1, {3, 4, 5}, 0},
                             {"a", 2, 2, {6, 7, 8}, 1},
                             {"a", 3, 3, {9, 10, 11}, 1},
                             {"b", 0, 0, {0, 1}, 0},
                             {"b", 1, 1, {2, 3}, 0},
                             {"b", 2, 2, {4, 5}, 0},
                             {"b", 3, 3, {6, 7}, 1},
                             {"b", 4, 4, {8, 9}, 1},
                             {"b", 5, 5, {10, 11}, 1},
                             {"c", 0, 0, {0, 1, 2, 3, 4, 5}, 0},
                             {"c", 1, 1, {6, 7, 8, 9, 10, 11}, 1},
                         });
  CHECK(local_world_sizes(placement) == std::vector<int>{4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 2, 2});
  CHECK(placement.warnings ==
        std::vector<std::string>{"tensor-parallel group [8, 9, 10, 11] spans hosts b and c: its "
                                 "all-reduces will cross the network"});
}

TEST_CASE("odd slot counts make the last tensor groups straddle, out of rank order on the host") {
  const ProcessGrid grid(GridShape{.pipeline = 2, .data = 2, .tensor = 2});
  const auto placement =
      place_ranks(grid, {host_with_slots("a", 3), host_with_slots("b", 3), host_with_slots("c", 2)},
                  cores_and_nodes(6, 1), DeviceKind::kCpu);
  check_ranks(placement, {
                             {"a", 0, 0, {0, 1}, 0},
                             {"a", 1, 1, {2, 3}, 0},
                             {"b", 0, 0, {0, 1}, 0},
                             {"b", 1, 1, {2, 3}, 0},
                             {"c", 0, 0, {0, 1, 2}, 0},
                             {"c", 1, 1, {3, 4, 5}, 0},
                             {"a", 2, 2, {4, 5}, 0},
                             {"b", 2, 2, {4, 5}, 0},
                         });
  CHECK(local_world_sizes(placement) == std::vector<int>{3, 3, 3, 3, 2, 2, 3, 3});
  CHECK(placement.ranks[6].device == "cpu");
  CHECK(placement.warnings ==
        std::vector<std::string>{"tensor-parallel group [6, 7] spans hosts a and b: its "
                                 "all-reduces will cross the network"});
}

TEST_CASE("a tensor group bigger than every host names all the hosts it spans") {
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 1, .tensor = 4});
  const auto placement = place_ranks(grid,
                                     {host_with_slots("a", 2), host_with_slots("idle", 0),
                                      host_with_slots("b", 1), host_with_slots("c", 1)},
                                     cores_and_nodes(2, 1), DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 0, 0, {0}, 0},
                             {"a", 1, 1, {1}, 0},
                             {"b", 0, 0, {0, 1}, 0},
                             {"c", 0, 0, {0, 1}, 0},
                         });
  CHECK(placement.warnings ==
        std::vector<std::string>{"tensor-parallel group [0, 1, 2, 3] spans hosts a, b and c: its "
                                 "all-reduces will cross the network"});
}

TEST_CASE("include-filtered GPUs 0,1,4,5 give each tensor group of 2 its own NVLink island") {
  HostTopology topology = cores_and_nodes(8, 2);
  topology.gpu_islands = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  const ProcessGrid grid(GridShape{.pipeline = 2, .data = 2, .tensor = 2});
  const auto placement =
      place_ranks(grid, {HostSlots{"a", {0, 1, 4, 5}}, HostSlots{"b", {0, 1, 4, 5}}}, topology,
                  DeviceKind::kCuda);
  // 8 GPUs per host (from the islands), so GPUs 0-3 are on node 0, 4-7 on node 1.
  check_ranks(placement, {
                             {"a", 0, 0, {0, 1}, 0},
                             {"a", 1, 1, {2, 3}, 0},
                             {"a", 4, 2, {4, 5}, 1},
                             {"a", 5, 3, {6, 7}, 1},
                             {"b", 0, 0, {0, 1}, 0},
                             {"b", 1, 1, {2, 3}, 0},
                             {"b", 4, 2, {4, 5}, 1},
                             {"b", 5, 3, {6, 7}, 1},
                         });
  CHECK(placement.ranks[2].device == "cuda:4");
  CHECK(placement.warnings.empty());
}

TEST_CASE("a GPU's NUMA node does not change when only some of the host's GPUs are selected") {
  // An 8-GPU host with 2 NUMA nodes: GPUs 0-3 sit on node 0 whatever is selected.
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 1});
  const auto placement =
      place_ranks(grid, {HostSlots{"a", {0, 1}, 8}}, cores_and_nodes(16, 2), DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 0, 0, {0, 1, 2, 3}, 0},
                             {"a", 1, 1, {4, 5, 6, 7}, 0},
                         });
  CHECK(to_rankfile(placement) == "rank 0=a slot=0-3\nrank 1=a slot=4-7\n");
}

TEST_CASE("include a:0,1 and num_gpus 2 on an 8-GPU host bind GPU 1 to NUMA node 0") {
  const auto parsed = parse_hostfile("a slots=8\n");
  REQUIRE(parsed.errors.empty());
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 1});
  for (const auto& [include, num_gpus] :
       std::vector<std::pair<std::string, int>>{{"a:0,1", -1}, {"", 2}}) {
    INFO("include \"" << include << "\", num_gpus " << num_gpus);
    const auto selection = select_resources(parsed.hosts, include, "", -1, num_gpus);
    REQUIRE(selection.errors.empty());
    check_ranks(place_ranks(grid, selection.hosts, cores_and_nodes(16, 2), DeviceKind::kCuda),
                {
                    {"a", 0, 0, {0, 1, 2, 3}, 0},
                    {"a", 1, 1, {4, 5, 6, 7}, 0},
                });
  }
}

TEST_CASE("GPUs left out of gpu_islands still count toward the host's GPU count") {
  // The islands name GPUs 0, 1, 6 and 7 of 8: 4 entries, but the host has 8
  // GPUs, so with 4 NUMA nodes GPU 1 is on node 0 and GPU 6 on node 3.
  HostTopology topology = cores_and_nodes(8, 4);
  topology.gpu_islands = {{0, 1}, {6, 7}};
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 4, .tensor = 1});
  const auto placement =
      place_ranks(grid, {HostSlots{"a", {0, 1, 6, 7}}}, topology, DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 0, 0, {0}, 0},
                             {"a", 1, 1, {1}, 0},
                             {"a", 6, 2, {6}, 3},
                             {"a", 7, 3, {7}, 3},
                         });
}

TEST_CASE("tensor groups take the GPUs of one island even when islands interleave indices") {
  HostTopology topology = cores_and_nodes(16, 2);
  topology.gpu_islands = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 4});
  const auto placement = place_ranks(grid, {host_with_slots("a", 8)}, topology, DeviceKind::kCuda);
  // Cores follow the GPU, not the rank: node 0's GPUs 0-3 split cores 0-7 in GPU order.
  check_ranks(placement, {
                             {"a", 0, 0, {0, 1}, 0},
                             {"a", 2, 1, {4, 5}, 0},
                             {"a", 4, 2, {8, 9}, 1},
                             {"a", 6, 3, {12, 13}, 1},
                             {"a", 1, 4, {2, 3}, 0},
                             {"a", 3, 5, {6, 7}, 0},
                             {"a", 5, 6, {10, 11}, 1},
                             {"a", 7, 7, {14, 15}, 1},
                         });
  CHECK(placement.warnings.empty());
}

TEST_CASE("a tensor group that fits in no island's room takes the leftovers") {
  HostTopology topology = cores_and_nodes(10, 1);
  topology.gpu_islands = {{0, 1, 2, 3}, {4, 5}, {6, 7, 8, 9}};
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 2});
  // On this host the islands are {3}, {4, 5} and {8}: in GPU order both
  // groups would cross islands; packing keeps [0, 1] inside {4, 5}.
  const auto placement =
      place_ranks(grid, {HostSlots{"a", {3, 4, 5, 8}}}, topology, DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 4, 0, {2, 3, 4}, 0},
                             {"a", 5, 1, {5, 6}, 0},
                             {"a", 3, 2, {0, 1}, 0},
                             {"a", 8, 3, {7, 8, 9}, 0},
                         });
  CHECK(placement.warnings.empty());
}

TEST_CASE("GPUs outside the listed islands are islands alone") {
  HostTopology topology = cores_and_nodes(4, 1);
  topology.gpu_islands = {{2, 3}};
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 2});
  // Islands {0}, {1}, {2, 3}: the first group goes to {2, 3}.
  const auto placement = place_ranks(grid, {host_with_slots("a", 4)}, topology, DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 2, 0, {2}, 0},
                             {"a", 3, 1, {3}, 0},
                             {"a", 0, 2, {0}, 0},
                             {"a", 1, 3, {1}, 0},
                         });
}

TEST_CASE("on a DGX A100 each GPU's rank is bound to half of its NUMA node's cores") {
  HostTopology topology = cores_and_nodes(128, 8);
  topology.gpu_islands = {{0, 1, 2, 3, 4, 5, 6, 7}};
  topology.gpu_numa_node = {3, 3, 1, 1, 7, 7, 5, 5};
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 1, .tensor = 8});
  const auto placement =
      place_ranks(grid, {host_with_slots("dgx", 8)}, topology, DeviceKind::kCuda);
  REQUIRE(placement.errors.empty());
  CHECK(to_rankfile(placement) ==
        "rank 0=dgx slot=48-55\n"
        "rank 1=dgx slot=56-63\n"
        "rank 2=dgx slot=16-23\n"
        "rank 3=dgx slot=24-31\n"
        "rank 4=dgx slot=112-119\n"
        "rank 5=dgx slot=120-127\n"
        "rank 6=dgx slot=80-87\n"
        "rank 7=dgx slot=88-95\n");
  std::vector<int> nodes;
  for (const auto& rank : placement.ranks) nodes.push_back(rank.numa_node);
  CHECK(nodes == std::vector<int>{3, 3, 1, 1, 7, 7, 5, 5});
}

TEST_CASE("a GPU whose NUMA node is unknown (-1) is spread by its index") {
  HostTopology topology = cores_and_nodes(4, 2);
  topology.gpu_numa_node = {1, -1};
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 1});
  const auto placement = place_ranks(grid, {host_with_slots("a", 2)}, topology, DeviceKind::kCuda);
  check_ranks(placement, {
                             {"a", 0, 0, {2}, 1},
                             {"a", 1, 1, {3}, 1},
                         });
}

TEST_CASE("more CPU ranks than cores share the cores round-robin") {
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 4, .tensor = 1});
  const auto placement =
      place_ranks(grid, {host_with_slots("laptop", 4)}, cores_and_nodes(2, 1), DeviceKind::kCpu);
  check_ranks(placement, {
                             {"laptop", 0, 0, {0}, 0},
                             {"laptop", 1, 1, {1}, 0},
                             {"laptop", 2, 2, {0}, 0},
                             {"laptop", 3, 3, {1}, 0},
                         });
  CHECK(to_rankfile(placement) ==
        "rank 0=laptop slot=0\nrank 1=laptop slot=1\nrank 2=laptop slot=0\nrank 3=laptop "
        "slot=1\n");
}

TEST_CASE("CPU ranks split a host's cores contiguously even when they do not divide evenly") {
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 3, .tensor = 1});
  const auto placement =
      place_ranks(grid, {host_with_slots("a", 3)}, cores_and_nodes(8, 2), DeviceKind::kCpu);
  check_ranks(placement, {
                             {"a", 0, 0, {0, 1}, 0},
                             {"a", 1, 1, {2, 3, 4}, 0},
                             {"a", 2, 2, {5, 6, 7}, 1},
                         });
  CHECK(to_rankfile(placement) == "rank 0=a slot=0-1\nrank 1=a slot=2-4\nrank 2=a slot=5-7\n");
}

TEST_CASE("CPU ranks ignore GPU islands") {
  HostTopology topology = cores_and_nodes(4, 1);
  topology.gpu_islands = {{1, 2}};
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 2});
  const auto placement = place_ranks(grid, {host_with_slots("a", 4)}, topology, DeviceKind::kCpu);
  check_ranks(placement, {
                             {"a", 0, 0, {0}, 0},
                             {"a", 1, 1, {1}, 0},
                             {"a", 2, 2, {2}, 0},
                             {"a", 3, 3, {3}, 0},
                         });
}

TEST_CASE("the rankfile writes core lists as comma-separated runs") {
  Placement placement;
  for (const auto& [host, cores] : std::vector<std::pair<std::string, std::vector<int>>>{
           {"node-1", {0, 2, 3, 4, 7}}, {"node-2", {5}}, {"node-2", {0, 2}}}) {
    RankPlacement& rank = placement.ranks.emplace_back();
    rank.rank = static_cast<int>(placement.ranks.size()) - 1;
    rank.host = host;
    rank.cpu_cores = cores;
  }
  CHECK(to_rankfile(placement) ==
        "rank 0=node-1 slot=0,2-4,7\n"
        "rank 1=node-2 slot=5\n"
        "rank 2=node-2 slot=0,2\n");
}

TEST_CASE("an inconsistent host topology or slot list is an error") {
  const ProcessGrid grid(GridShape{.pipeline = 1, .data = 2, .tensor = 1});
  const std::vector<HostSlots> hosts = {host_with_slots("a", 2)};

  CHECK(place_ranks(grid, hosts, cores_and_nodes(0, 1), DeviceKind::kCpu).errors ==
        std::vector<std::string>{"topology: cores is 0; a host needs at least 1 core"});
  CHECK(place_ranks(grid, hosts, cores_and_nodes(2, 3), DeviceKind::kCpu).errors ==
        std::vector<std::string>{"topology: numa_nodes is 3; it must be between 1 and cores (2)"});

  HostTopology topology = cores_and_nodes(4, 2);
  topology.gpu_islands = {{0, 1}, {1, -2}};
  topology.gpu_numa_node = {0, 2};
  const auto bad = place_ranks(grid, hosts, topology, DeviceKind::kCuda);
  CHECK(bad.errors ==
        std::vector<std::string>{
            "topology: gpu_islands lists GPU -2; GPU indices start at 0",
            "topology: gpu_islands lists GPU 1 more than once; each GPU belongs to one island",
            "topology: gpu_numa_node puts GPU 1 on node 2, but there are 2 NUMA nodes (-1 means "
            "unknown)"});
  CHECK(bad.ranks.empty());

  const auto unsorted =
      place_ranks(grid, {HostSlots{"a", {1, 0}}}, cores_and_nodes(2, 1), DeviceKind::kCuda);
  CHECK(unsorted.errors ==
        std::vector<std::string>{
            "host a: slots must be distinct, non-negative and in increasing order"});

  const auto past_total =
      place_ranks(grid, {HostSlots{"a", {0, 4}, 4}}, cores_and_nodes(2, 1), DeviceKind::kCuda);
  CHECK(past_total.errors == std::vector<std::string>{"host a: slot 4 is past the host's 4 slots"});
}

TEST_CASE("for many shapes and host sizes every slot takes one rank and groups stay whole") {
  for (int model : {1, 2, 3, 4, 8}) {
    for (int hosts_count : {1, 2, 3, 5}) {
      for (int slots_per_host : {1, 2, 4, 6, 8}) {
        const int world = hosts_count * slots_per_host;
        if (world % model != 0) continue;
        std::vector<HostSlots> hosts;
        for (int h = 0; h < hosts_count; ++h) {
          hosts.push_back(host_with_slots("h" + std::to_string(h), slots_per_host));
        }
        HostTopology topology = cores_and_nodes(16, 2);
        topology.gpu_islands = {{0, 1, 2}, {3, 4, 5, 6, 7}};
        const ProcessGrid grid(GridShape{.pipeline = 1, .data = world / model, .tensor = model});
        const auto placement = place_ranks(grid, hosts, topology, DeviceKind::kCuda);
        INFO("model " << model << ", " << hosts_count << " hosts x " << slots_per_host);
        REQUIRE(placement.errors.empty());
        REQUIRE(placement.ranks.size() == static_cast<size_t>(world));

        std::set<std::pair<std::string, int>> used;
        std::map<std::string, std::vector<int>> ranks_on_host;
        for (const auto& rank : placement.ranks) {
          REQUIRE(used.insert({rank.host, rank.slot}).second);
          ranks_on_host[rank.host].push_back(rank.rank);
          REQUIRE(!rank.cpu_cores.empty());
          REQUIRE(rank.cpu_cores.front() >= 0);
          REQUIRE(rank.cpu_cores.back() < 16);
        }
        for (const auto& rank : placement.ranks) {
          const auto& local = ranks_on_host[rank.host];
          REQUIRE(rank.local_world_size == static_cast<int>(local.size()));
          REQUIRE(local[rank.local_rank] == rank.rank);
        }

        int straddling = 0;
        for (const auto& group : grid.tensor_groups()) {
          std::set<std::string> group_hosts;
          for (int rank : group) group_hosts.insert(placement.ranks[rank].host);
          if (group_hosts.size() > 1) ++straddling;
        }
        const int whole_per_host = slots_per_host / model;
        REQUIRE(straddling == world / model - hosts_count * whole_per_host);
        REQUIRE(placement.warnings.size() == static_cast<size_t>(straddling));
      }
    }
  }
}

TEST_CASE("131072 ranks on 16384 hosts of 8 GPUs are placed stage by stage") {
  std::vector<HostSlots> hosts;
  for (int h = 0; h < 16384; ++h) hosts.push_back(host_with_slots("node" + std::to_string(h), 8));
  HostTopology topology = cores_and_nodes(128, 8);
  topology.gpu_islands = {{0, 1, 2, 3, 4, 5, 6, 7}};
  const ProcessGrid grid(GridShape{.pipeline = 16, .data = 1024, .tensor = 8});
  const auto placement = place_ranks(grid, hosts, topology, DeviceKind::kCuda);
  REQUIRE(placement.errors.empty());
  CHECK(placement.warnings.empty());
  const RankPlacement& last = placement.ranks.back();
  CHECK(last.host == "node16383");
  CHECK(last.slot == 7);
  CHECK(last.local_rank == 7);
  CHECK(last.cpu_cores == std::vector<int>{112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122,
                                           123, 124, 125, 126, 127});
  // Stage 1 starts on the host after stage 0's 1024 hosts.
  CHECK(placement.ranks[8192].host == "node1024");
  const std::string rankfile = to_rankfile(placement);
  const std::string last_line = "rank 131071=node16383 slot=112-127\n";
  REQUIRE(rankfile.size() > last_line.size());
  CHECK(rankfile.substr(rankfile.size() - last_line.size()) == last_line);
}
