#include "topology/slurm_nodelist.h"

#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using Catch::Matchers::Contains;
using dslaunch::topology::expand_nodelist;
using dslaunch::topology::expand_tasks_per_node;
using dslaunch::topology::hosts_from_slurm_environment;
using dslaunch::topology::NodelistExpansion;
using dslaunch::topology::SlurmHosts;
using dslaunch::topology::TasksPerNode;

namespace {

using Names = std::vector<std::string>;

Names expanded(std::string_view nodelist) {
  const NodelistExpansion expansion = expand_nodelist(nodelist);
  INFO(nodelist);
  CHECK(expansion.error.empty());
  return expansion.hosts;
}

// The error of a node list that must fail; a failed expansion holds no hosts.
std::string nodelist_error(std::string_view nodelist) {
  const NodelistExpansion expansion = expand_nodelist(nodelist);
  INFO(nodelist);
  CHECK(expansion.hosts.empty());
  CHECK_FALSE(expansion.error.empty());
  return expansion.error;
}

std::string tasks_error(std::string_view tasks) {
  const TasksPerNode expansion = expand_tasks_per_node(tasks);
  INFO(tasks);
  CHECK(expansion.counts.empty());
  CHECK_FALSE(expansion.error.empty());
  return expansion.error;
}

// A getenv over a fixed environment, as the launcher's would see inside an allocation.
std::optional<SlurmHosts> from_environment(const std::map<std::string, std::string>& env) {
  return hosts_from_slurm_environment([&env](const char* name) -> const char* {
    const auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  });
}

}  // namespace

TEST_CASE("a node list expands in list order, ranges and single numbers alike") {
  CHECK(expanded("node[01-03,07],gpu-a[1-2],login") ==
        Names{"node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2", "login"});
}

TEST_CASE("a plain host name or a single-number group expands to one host") {
  CHECK(expanded("login") == Names{"login"});
  CHECK(expanded("node[5]") == Names{"node5"});
  CHECK(expanded("node[007]") == Names{"node007"});
  CHECK(expanded("a,b.example.com,10.0.0.1") == Names{"a", "b.example.com", "10.0.0.1"});
}

TEST_CASE("zero padding follows the width of each range's first bound") {
  CHECK(expanded("node[08-10]") == Names{"node08", "node09", "node10"});
  CHECK(expanded("n[1-10]") == Names{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"});
  CHECK(expanded("n[98-101]") == Names{"n98", "n99", "n100", "n101"});
  CHECK(expanded("n[001-3]") == Names{"n001", "n002", "n003"});
  CHECK(expanded("n[9,010-011]") == Names{"n9", "n010", "n011"});
}

TEST_CASE("several bracket groups in one name multiply, the leftmost varying slowest") {
  CHECK(expanded("r[1-2]n[1-2]") == Names{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(expanded("rack[1,3]-gpu[0-1]-ib,login") ==
        Names{"rack1-gpu0-ib", "rack1-gpu1-ib", "rack3-gpu0-ib", "rack3-gpu1-ib", "login"});
  CHECK(expanded("[1-2]x") == Names{"1x", "2x"});
}

TEST_CASE("unbalanced or nested brackets are errors quoting the host") {
  CHECK_THAT(nodelist_error("node[01-03"), Contains(R"(unbalanced "[" in "node[01-03")"));
  CHECK_THAT(nodelist_error("a,node[1,2,b"), Contains(R"(unbalanced "[" in "node[1,2,b")"));
  CHECK_THAT(nodelist_error("node01]"), Contains(R"(unbalanced "]" in "node01]")"));
  CHECK_THAT(nodelist_error("a,node[1]]"), Contains(R"(unbalanced "]" in "node[1]]")"));
  CHECK_THAT(nodelist_error("node[1[2]]"), Contains(R"(nested "[" in "node[1[")"));
}

TEST_CASE("an empty host or range is an error") {
  for (const char* list : {"a,,b", ",a", "a,"}) {
    CHECK_THAT(nodelist_error(list), Contains("empty host name") &&
                                         Contains("in node list \"" + std::string(list) + "\""));
  }
  CHECK_THAT(nodelist_error("node[]"), Contains(R"(empty range in "node[]")"));
  CHECK_THAT(nodelist_error("node[1,,2]"), Contains(R"(empty range in "node[1,,2]")"));
  CHECK_THAT(nodelist_error("node[1,]"), Contains(R"(empty range in "node[1,]")"));
}

TEST_CASE("a descending range is an error") {
  CHECK_THAT(nodelist_error("ok,node[5-3]"), Contains(R"(descending range "5-3" in "node[5-3]")") &&
                                                 Contains(R"(in node list "ok,node[5-3]")"));
}

TEST_CASE("a range that is not numeric is an error") {
  for (const char* range :
       {"a-b", "1-", "-3", "1-2-3", "+1", "0x1f", " 1", "1-99999999999999999999"}) {
    const std::string list = "node[" + std::string(range) + "]";
    CHECK_THAT(nodelist_error(list),
               Contains("range \"" + std::string(range) + "\" in \"" + list + "\" is not numeric"));
  }
}

TEST_CASE("an empty node list is an error") {
  CHECK_THAT(nodelist_error(""), Contains("empty node list"));
}

TEST_CASE("a node list too large to hold in memory is an error, not an allocation") {
  CHECK_THAT(nodelist_error("node[1-99999999999]"), Contains(R"(range "1-99999999999")"));
  CHECK_THAT(nodelist_error("a[0-4095]b[0-4095]"), Contains("expands to more than 1048576 nodes"));
  CHECK(expanded("n[1-100000]").size() == 100000);
}

TEST_CASE("a node listed twice is an error naming it") {
  CHECK(nodelist_error("node1,node1") ==
        R"(node "node1" is listed twice; list each node once (in node list "node1,node1"))");
  CHECK_THAT(nodelist_error("node[1-3],node2"), Contains(R"(node "node2" is listed twice)"));
  CHECK_THAT(nodelist_error("n[1,1]"), Contains(R"(node "n1" is listed twice)"));
  // Different padding makes different names, as Slurm writes them.
  CHECK(expanded("n[1],n[01]") == Names{"n1", "n01"});
}

TEST_CASE("a node name that is not a valid host name is an error") {
  CHECK(nodelist_error("ok,no:de[1-2]") ==
        R"(host name "no:de1" holds ":" (character 3), which separates hosts and slots in )"
        R"(include/exclude; a host name may hold only ASCII letters, digits, "-", "." and "_" )"
        R"((in node list "ok,no:de[1-2]"))");
  CHECK_THAT(nodelist_error("a@b"), Contains(R"(host name "a@b" holds "@")"));
  CHECK_THAT(nodelist_error("n\xff[1-2]"), Contains(R"(host name "n\xff1" holds "\xff")"));
  CHECK_THAT(nodelist_error("a b"), Contains(R"(host name "a b" holds " ")"));
  CHECK_THAT(nodelist_error("-n[1-2]"), Contains(R"(host name "-n1" starts with "-")"));
  CHECK_THAT(nodelist_error(std::string(250, 'n') + "[1000-1001]"),
             Contains("is 254 characters long"));
  CHECK(expanded("gpu_a[1-2].cluster") == Names{"gpu_a1.cluster", "gpu_a2.cluster"});
}

TEST_CASE("tasks per node expand their repetitions") {
  CHECK(expand_tasks_per_node("2(x3),1").counts == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4").counts == std::vector<int>{4});
  CHECK(expand_tasks_per_node("1,8(x2),3(x1)").counts == std::vector<int>{1, 8, 8, 3});
  CHECK(expand_tasks_per_node("2(x3),1").error.empty());
}

TEST_CASE("malformed tasks per node are errors quoting the item") {
  CHECK_THAT(tasks_error(""), Contains("empty tasks per node"));
  for (const char* item :
       {"2(x3", "2(3)", "2x3", "x", "(x2)", "2(x)", "2(x3)x", "-1", "2 ", "99999999999999999999"}) {
    const std::string text = "1," + std::string(item);
    CHECK_THAT(tasks_error(text),
               Contains("malformed item \"" + std::string(item) + "\" in \"" + text + "\"") &&
                   Contains(R"(expected counts such as "2(x3),1")"));
  }
  CHECK_THAT(tasks_error("2,,1"), Contains(R"(malformed item "" in "2,,1")"));
  CHECK_THAT(tasks_error("1(x99999999)"), Contains("too large"));
}

TEST_CASE("a task count above 65,536 per node is an error, not a slot list") {
  CHECK(expand_tasks_per_node("65536,1").counts == std::vector<int>{65536, 1});
  CHECK(tasks_error("1,65537") ==
        R"(item "65537" in "1,65537" asks for 65537 tasks on one node, more than the 65536 )"
        R"(slots one host may have; ask Slurm for fewer (--ntasks-per-node))");
  CHECK_THAT(tasks_error("2147483647(x2)"), Contains("asks for 2147483647 tasks on one node"));

  const auto slurm = from_environment(
      {{"SLURM_JOB_NODELIST", "node[1-2]"}, {"SLURM_TASKS_PER_NODE", "8,2147483647"}});
  REQUIRE(slurm.has_value());
  CHECK(slurm->hosts.empty());
  CHECK_THAT(slurm->error, Contains(R"(SLURM_TASKS_PER_NODE: item "2147483647")"));
}

TEST_CASE("an allocation that lists a node twice is an error naming the variable") {
  const auto slurm =
      from_environment({{"SLURM_JOB_NODELIST", "node1,node1"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}});
  REQUIRE(slurm.has_value());
  CHECK(slurm->hosts.empty());
  CHECK_THAT(slurm->error, Contains(R"(SLURM_JOB_NODELIST: node "node1" is listed twice)"));
}

TEST_CASE("task counts below 1 are errors") {
  CHECK_THAT(tasks_error("2,0"), Contains(R"(item "0" in "2,0" has a count below 1)"));
  CHECK_THAT(tasks_error("2(x0)"), Contains(R"x(item "2(x0)" in "2(x0)" has a count below 1)x"));
}

TEST_CASE("outside a Slurm allocation there are no Slurm hosts") {
  CHECK_FALSE(from_environment({}).has_value());
  CHECK_FALSE(from_environment({{"SLURM_TASKS_PER_NODE", "4"}}).has_value());
}

TEST_CASE("an allocation's hosts take their slots from the tasks per node") {
  const auto slurm = from_environment(
      {{"SLURM_JOB_NODELIST", "node[01-03],login"}, {"SLURM_TASKS_PER_NODE", "4(x2),2,1"}});
  REQUIRE(slurm.has_value());
  CHECK(slurm->error.empty());
  std::vector<std::string> hosts;
  for (const auto& entry : slurm->hosts) {
    hosts.push_back(entry.host + " slots=" + std::to_string(entry.slots) + " line " +
                    std::to_string(entry.line));
  }
  CHECK(hosts == std::vector<std::string>{"node01 slots=4 line 0", "node02 slots=4 line 0",
                                          "node03 slots=2 line 0", "login slots=1 line 0"});
}

TEST_CASE("an allocation without SLURM_TASKS_PER_NODE is an error") {
  const auto slurm = from_environment({{"SLURM_JOB_NODELIST", "node[1-2]"}});
  REQUIRE(slurm.has_value());
  CHECK(slurm->hosts.empty());
  CHECK_THAT(slurm->error, Contains("SLURM_TASKS_PER_NODE is not"));
}

TEST_CASE("node and task lists of different lengths are an error stating both counts") {
  const auto slurm =
      from_environment({{"SLURM_JOB_NODELIST", "node[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x4)"}});
  REQUIRE(slurm.has_value());
  CHECK(slurm->hosts.empty());
  CHECK(slurm->error == "SLURM_JOB_NODELIST lists 3 nodes but SLURM_TASKS_PER_NODE describes 4");
}

TEST_CASE("a malformed Slurm variable is an error naming it") {
  const auto bad_nodes =
      from_environment({{"SLURM_JOB_NODELIST", "node[3-1]"}, {"SLURM_TASKS_PER_NODE", "1"}});
  REQUIRE(bad_nodes.has_value());
  CHECK(bad_nodes->hosts.empty());
  CHECK_THAT(bad_nodes->error, Contains("SLURM_JOB_NODELIST: descending range"));

  const auto empty_nodes =
      from_environment({{"SLURM_JOB_NODELIST", ""}, {"SLURM_TASKS_PER_NODE", "1"}});
  REQUIRE(empty_nodes.has_value());
  CHECK_THAT(empty_nodes->error, Contains("SLURM_JOB_NODELIST: empty node list"));

  const auto bad_tasks =
      from_environment({{"SLURM_JOB_NODELIST", "a,b"}, {"SLURM_TASKS_PER_NODE", "1(x2"}});
  REQUIRE(bad_tasks.has_value());
  CHECK(bad_tasks->hosts.empty());
  CHECK_THAT(bad_tasks->error, Contains(R"(SLURM_TASKS_PER_NODE: malformed item "1(x2")"));
}

TEST_CASE("the GPUs Slurm gave each node are read from SLURM_GPUS_ON_NODE") {
  auto slurm = from_environment({{"SLURM_JOB_NODELIST", "gpu[1-2]"},
                                 {"SLURM_TASKS_PER_NODE", "8(x2)"},
                                 {"SLURM_GPUS_ON_NODE", "8"}});
  REQUIRE(slurm.has_value());
  CHECK(slurm->error.empty());
  CHECK(slurm->gpus_per_node == 8);
  slurm = from_environment({{"SLURM_JOB_NODELIST", "cpu1"}, {"SLURM_TASKS_PER_NODE", "2"}});
  CHECK(slurm->gpus_per_node == 0);
  for (const char* bad : {"eight", "-1", "8x", "99999999"}) {
    slurm = from_environment({{"SLURM_JOB_NODELIST", "gpu1"},
                              {"SLURM_TASKS_PER_NODE", "8"},
                              {"SLURM_GPUS_ON_NODE", bad}});
    CAPTURE(bad);
    CHECK(slurm->hosts.empty());
    CHECK_THAT(slurm->error, Contains("SLURM_GPUS_ON_NODE"));
  }
}
