#include "topology/host_filter.h"

#include <climits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "topology/hostfile.h"

using Catch::Matchers::Contains;
using dslaunch::topology::HostfileEntry;
using dslaunch::topology::HostSlots;
using dslaunch::topology::kMaxWorldSize;
using dslaunch::topology::parse_hostfile;
using dslaunch::topology::ResourceSelection;
using dslaunch::topology::select_resources;

namespace {

using Hosts = std::vector<std::string>;

// The hostfile of DeepSpeed's launcher examples, with a smaller last host.
const std::vector<HostfileEntry>& cluster() {
  static const std::vector<HostfileEntry> hosts = {
      {"worker-0", 4, 1}, {"worker-1", 4, 2}, {"worker-2", 4, 3}, {"worker-3", 2, 4}};
  return hosts;
}

// Selected hosts written back in filter syntax, such as "worker-0:0,2".
Hosts rendered(const ResourceSelection& selection) {
  Hosts out;
  for (const auto& host : selection.hosts) {
    std::string text = host.host + ":";
    for (size_t i = 0; i < host.slots.size(); ++i) {
      text += (i == 0 ? "" : ",") + std::to_string(host.slots[i]);
    }
    out.push_back(text);
  }
  return out;
}

Hosts select(std::string_view include, std::string_view exclude = "", int num_nodes = -1,
             int num_gpus = -1) {
  const ResourceSelection selection =
      select_resources(cluster(), include, exclude, num_nodes, num_gpus);
  INFO("include \"" << include << "\", exclude \"" << exclude << "\"");
  CHECK(selection.errors.empty());
  return rendered(selection);
}

// The errors of a selection that must fail; a failed selection holds no hosts.
std::vector<std::string> errors_of(std::string_view include, std::string_view exclude = "",
                                   int num_nodes = -1, int num_gpus = -1) {
  const ResourceSelection selection =
      select_resources(cluster(), include, exclude, num_nodes, num_gpus);
  INFO("include \"" << include << "\", exclude \"" << exclude << "\"");
  CHECK_FALSE(selection.errors.empty());
  CHECK(selection.hosts.empty());
  return selection.errors;
}

std::string only_error(std::string_view include, std::string_view exclude = "", int num_nodes = -1,
                       int num_gpus = -1) {
  const std::vector<std::string> errors = errors_of(include, exclude, num_nodes, num_gpus);
  REQUIRE(errors.size() == 1);
  return errors[0];
}

}  // namespace

TEST_CASE("with no filters every host keeps all of its slots") {
  CHECK(select("") ==
        Hosts{"worker-0:0,1,2,3", "worker-1:0,1,2,3", "worker-2:0,1,2,3", "worker-3:0,1"});
}

TEST_CASE("include of a bare host takes all of its slots and drops the hosts not named") {
  CHECK(select("worker-1") == Hosts{"worker-1:0,1,2,3"});
  CHECK(select("worker-3@worker-1") == Hosts{"worker-1:0,1,2,3", "worker-3:0,1"});
}

TEST_CASE("include of host:slots takes just those slots, as in DeepSpeed's worker-2:0,1") {
  CHECK(select("worker-2:0,1") == Hosts{"worker-2:0,1"});
  CHECK(select("worker-0:0,2@worker-1") == Hosts{"worker-0:0,2", "worker-1:0,1,2,3"});
}

TEST_CASE("the selection keeps hostfile order with slots sorted and distinct") {
  CHECK(select("worker-2:3,1@worker-0:2,2,0") == Hosts{"worker-0:0,2", "worker-2:1,3"});
}

TEST_CASE("a repeated host merges its slots") {
  CHECK(select("worker-0:0@worker-0:2") == select("worker-0:0,2"));
  CHECK(select("worker-0:0@worker-0:2") == Hosts{"worker-0:0,2"});
  CHECK(select("worker-0:1@worker-0") == Hosts{"worker-0:0,1,2,3"});
  CHECK(select("", "worker-0:0@worker-0:3") ==
        Hosts{"worker-0:1,2", "worker-1:0,1,2,3", "worker-2:0,1,2,3", "worker-3:0,1"});
}

TEST_CASE("exclude of a bare host removes it") {
  CHECK(select("", "worker-1") == Hosts{"worker-0:0,1,2,3", "worker-2:0,1,2,3", "worker-3:0,1"});
  CHECK(select("", "worker-1:0@worker-1") ==
        Hosts{"worker-0:0,1,2,3", "worker-2:0,1,2,3", "worker-3:0,1"});
}

TEST_CASE("exclude of host:slots removes those slots, as in DeepSpeed's worker-2:0@worker-3:0,1") {
  // worker-3 has slots 0 and 1 only, so it has none left and is dropped.
  CHECK(select("", "worker-2:0@worker-3:0,1") ==
        Hosts{"worker-0:0,1,2,3", "worker-1:0,1,2,3", "worker-2:1,2,3"});
}

TEST_CASE("include and exclude together are an error") {
  CHECK_THAT(only_error("worker-0", "worker-1"), Contains("include and exclude"));
}

TEST_CASE("an unknown host is an error naming it once") {
  CHECK(errors_of("worker-9@worker-0@worker-9:1") ==
        std::vector<std::string>{
            R"(include: unknown host "worker-9"; the hostfile does not list it)"});
  CHECK_THAT(only_error("", "gpu-7"), Contains(R"(exclude: unknown host "gpu-7")"));
}

TEST_CASE("a slot outside 0..slots-1 is an error naming the host and the slot") {
  const std::vector<std::string> errors = errors_of("worker-3:0,2@worker-0:-1,4");
  REQUIRE(errors.size() == 3);
  CHECK_THAT(errors[0],
             Contains(R"(include: host "worker-0" has no slot -1; its slots are 0 to 3)"));
  CHECK_THAT(errors[1], Contains(R"(host "worker-0" has no slot 4)"));
  CHECK_THAT(errors[2], Contains(R"(host "worker-3" has no slot 2; its slots are 0 to 1)"));
  CHECK_THAT(only_error("", "worker-1:7"), Contains(R"(exclude: host "worker-1" has no slot 7)"));
}

TEST_CASE("a malformed filter is an error quoting the bad part") {
  CHECK_THAT(only_error(":0"), Contains(R"(no host name in ":0")"));
  CHECK_THAT(only_error("worker-0:"), Contains(R"("worker-0:" lists no slots)"));
  CHECK_THAT(only_error("worker-0:x"), Contains(R"(slot "x" in "worker-0:x" is not an integer)"));
  CHECK_THAT(only_error("worker-0:1.5"), Contains(R"(slot "1.5" in "worker-0:1.5")"));
  CHECK_THAT(only_error("worker-0:0,,1"), Contains(R"(slot "" in "worker-0:0,,1")"));
  CHECK_THAT(only_error("worker-0:1:2"), Contains(R"(slot "1:2" in "worker-0:1:2")"));
  CHECK_THAT(only_error("worker-0@@worker-1"), Contains(R"(empty host in "worker-0@@worker-1")"));
  CHECK_THAT(only_error("", "worker-0@"), Contains(R"(exclude: empty host in "worker-0@")"));
}

TEST_CASE("num_nodes keeps the first N hosts") {
  CHECK(select("", "", 2) == Hosts{"worker-0:0,1,2,3", "worker-1:0,1,2,3"});
  CHECK(select("", "", 4) ==
        Hosts{"worker-0:0,1,2,3", "worker-1:0,1,2,3", "worker-2:0,1,2,3", "worker-3:0,1"});
}

TEST_CASE("num_gpus keeps each host's first N slots") {
  CHECK(select("", "", -1, 2) ==
        Hosts{"worker-0:0,1", "worker-1:0,1", "worker-2:0,1", "worker-3:0,1"});
  CHECK(select("", "", -1, 1) == Hosts{"worker-0:0", "worker-1:0", "worker-2:0", "worker-3:0"});
  CHECK(select("", "", 2, 3) == Hosts{"worker-0:0,1,2", "worker-1:0,1,2"});
}

TEST_CASE("num_nodes or num_gpus with include or exclude is an error, as in DeepSpeed") {
  // DeepSpeed's runner: "Cannot specify num_nodes/gpus with include/exclude". Without
  // the rule, include worker-0:1 with num_gpus 1 would silently run on GPU 1.
  CHECK(only_error("worker-0:1", "", -1, 1) ==
        "num_gpus cannot be used with include: DeepSpeed's launcher rejects num_nodes/num_gpus "
        "together with include/exclude; choose the hosts and slots with include alone (such as "
        "\"worker-0:0,1\") or drop num_gpus");
  CHECK(only_error("", "worker-0", 1) ==
        "num_nodes cannot be used with exclude: DeepSpeed's launcher rejects num_nodes/num_gpus "
        "together with include/exclude; choose the hosts and slots with exclude alone (such as "
        "\"worker-0:0,1\") or drop num_nodes");
  const std::vector<std::string> both = errors_of("worker-3@worker-2:1", "", 2, 1);
  REQUIRE(both.size() == 2);
  CHECK(both[0].starts_with("num_nodes cannot be used with include"));
  CHECK(both[1].starts_with("num_gpus cannot be used with include"));
  // A count that is not -1 is a count given, even an invalid one.
  CHECK_THAT(only_error("", "worker-1:0", 0), Contains("num_nodes cannot be used with exclude"));
}

TEST_CASE("asking for more nodes or GPUs than there are is an error stating both numbers") {
  CHECK(only_error("", "", 5) == "num_nodes is 5 but the selection has only 4 hosts");
  CHECK(only_error("", "", -1, 3) ==
        R"(num_gpus is 3 but host "worker-3" has only 2 selected slots)");
  CHECK(errors_of("", "", 5, 4) ==
        std::vector<std::string>{"num_nodes is 5 but the selection has only 4 hosts",
                                 R"(num_gpus is 4 but host "worker-3" has only 2 selected slots)"});
  // num_nodes applies first, so the small worker-3 no longer counts.
  CHECK(select("", "", 3, 4).size() == 3);
}

TEST_CASE("num_nodes and num_gpus must be -1 or at least 1") {
  CHECK(only_error("", "", 0) == "num_nodes must be -1 (all) or at least 1, got 0");
  CHECK(only_error("", "", -1, -2) == "num_gpus must be -1 (all) or at least 1, got -2");
}

TEST_CASE("a selection left with no hosts is an error") {
  CHECK_THAT(only_error("", "worker-0@worker-1@worker-2@worker-3"), Contains("no hosts selected"));
  const ResourceSelection none = select_resources({}, "", "", -1, -1);
  REQUIRE(none.errors.size() == 1);
  CHECK_THAT(none.errors[0], Contains("no hosts selected"));
}

TEST_CASE("every error is collected, and a failed selection holds no hosts") {
  const std::vector<std::string> errors = errors_of("worker-0:9@nowhere", "worker-1@", 0, 0);
  REQUIRE(errors.size() == 6);
  CHECK_THAT(errors[0], Contains("include and exclude"));
  CHECK_THAT(errors[1], Contains("num_nodes cannot be used with include"));
  CHECK_THAT(errors[2], Contains("num_gpus cannot be used with include"));
  CHECK_THAT(errors[3], Contains(R"(unknown host "nowhere")"));
  CHECK_THAT(errors[4], Contains(R"(host "worker-0" has no slot 9)"));
  CHECK_THAT(errors[5], Contains("exclude: empty host"));
}

TEST_CASE("each selected host carries its slot count before filters") {
  const ResourceSelection selection =
      select_resources(cluster(), "worker-0:1@worker-3", "", -1, -1);
  REQUIRE(selection.errors.empty());
  std::vector<int> totals;
  for (const HostSlots& host : selection.hosts) totals.push_back(host.total_slots);
  CHECK(rendered(selection) == Hosts{"worker-0:1", "worker-3:0,1"});
  CHECK(totals == std::vector<int>{4, 2});

  const ResourceSelection counted = select_resources(cluster(), "", "", 1, 2);
  REQUIRE(counted.hosts.size() == 1);
  CHECK(counted.hosts[0].slots == std::vector<int>{0, 1});
  CHECK(counted.hosts[0].total_slots == 4);
}

TEST_CASE("a selection beyond 2,097,152 slots is an error found before any slot list is built") {
  REQUIRE(kMaxWorldSize == 2097152);
  // Inline hosts are not capped per host as hostfiles are: a typo reaches here.
  // Building this slot list would take 8 GB.
  const std::vector<HostfileEntry> typo = {{"a", 8, 1}, {"huge", INT_MAX, 2}};
  const ResourceSelection selection = select_resources(typo, "", "", -1, -1);
  CHECK(selection.hosts.empty());
  CHECK(selection.errors ==
        std::vector<std::string>{
            "2147483655 ranks on 2 host(s) is more than dslaunch plans (2097152); check the slots "
            "in the hostfile, or select fewer with num_nodes, num_gpus or include"});
  CHECK(select_resources(typo, "", "huge:0", -1, -1).errors.size() == 1);

  // What counts is the selection, so a few slots of a huge host are fine.
  const ResourceSelection few = select_resources(typo, "huge:0,5@a:7", "", -1, -1);
  REQUIRE(few.errors.empty());
  CHECK(rendered(few) == Hosts{"a:7", "huge:0,5"});
  CHECK(few.hosts[1].total_slots == INT_MAX);
  const ResourceSelection first_two = select_resources(typo, "", "", -1, 2);
  REQUIRE(first_two.errors.empty());
  CHECK(rendered(first_two) == Hosts{"a:0,1", "huge:0,1"});
}

TEST_CASE("exactly 2,097,152 slots are selected, one more is an error") {
  std::vector<HostfileEntry> hosts;
  for (int i = 0; i < 32; ++i) hosts.push_back({"n" + std::to_string(i), 65536, i + 1});
  const ResourceSelection full = select_resources(hosts, "", "", -1, -1);
  REQUIRE(full.errors.empty());
  REQUIRE(full.hosts.size() == 32);
  CHECK(full.hosts.back().slots.size() == 65536);
  CHECK(full.hosts.back().slots.back() == 65535);

  hosts.push_back({"extra", 1, 33});
  const ResourceSelection over = select_resources(hosts, "", "", -1, -1);
  CHECK(over.hosts.empty());
  REQUIRE(over.errors.size() == 1);
  CHECK(over.errors[0].starts_with("2097153 ranks on 33 host(s) is more than dslaunch plans"));
  CHECK(select_resources(hosts, "", "extra", -1, -1).errors.empty());
}

TEST_CASE("a host whose name is not a valid host name is an error naming its line") {
  const std::vector<HostfileEntry> hosts = {
      {"worker-0", 2, 1}, {"gpu:7", 2, 4}, {"node\xff", 1, 0}};
  const ResourceSelection selection = select_resources(hosts, "", "", -1, -1);
  CHECK(selection.hosts.empty());
  CHECK(selection.errors ==
        std::vector<std::string>{
            R"(host name "gpu:7" holds ":" (character 4), which separates hosts and slots in )"
            R"(include/exclude; a host name may hold only ASCII letters, digits, "-", "." and "_" )"
            R"((declared on line 4))",
            R"(host name "node\xff" holds "\xff" (character 5); a host name may hold only ASCII )"
            R"(letters, digits, "-", "." and "_")"});
}

// How fast this is is measured by `bazel run //bench:hostfile_bench`; a unit
// test on a shared machine only checks the result.
TEST_CASE("a 16,384-host hostfile is filtered to the right slots") {
  std::string text;
  std::string exclude;
  for (int i = 0; i < 16384; ++i) {
    text += "worker-" + std::to_string(i) + " slots=8\n";
    if (i % 2 == 1) exclude += "worker-" + std::to_string(i) + ":0,7@";
  }
  exclude.pop_back();
  const auto parsed = parse_hostfile(text);
  REQUIRE(parsed.errors.empty());

  const ResourceSelection excluded = select_resources(parsed.hosts, "", exclude, -1, -1);
  REQUIRE(excluded.errors.empty());
  REQUIRE(excluded.hosts.size() == 16384);
  CHECK(rendered(excluded)[0] == "worker-0:0,1,2,3,4,5,6,7");
  CHECK(rendered(excluded)[1] == "worker-1:1,2,3,4,5,6");
  CHECK(rendered(excluded)[16383] == "worker-16383:1,2,3,4,5,6");

  const ResourceSelection counted = select_resources(parsed.hosts, "", "", 16000, 4);
  REQUIRE(counted.errors.empty());
  REQUIRE(counted.hosts.size() == 16000);
  CHECK(rendered(counted)[15999] == "worker-15999:0,1,2,3");
}
