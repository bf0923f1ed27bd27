#include "topology/host_filter.h"

#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "topology/hostfile.h"

using Catch::Matchers::Contains;
using dslaunch::topology::HostfileEntry;
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

TEST_CASE("num_nodes keeps the first N selected hosts") {
  CHECK(select("", "", 2) == Hosts{"worker-0:0,1,2,3", "worker-1:0,1,2,3"});
  CHECK(select("", "worker-0", 1) == Hosts{"worker-1:0,1,2,3"});
  CHECK(select("worker-3@worker-2:1", "", 2) == Hosts{"worker-2:1", "worker-3:0,1"});
}

TEST_CASE("num_gpus keeps each host's first N selected slots") {
  CHECK(select("", "", -1, 2) ==
        Hosts{"worker-0:0,1", "worker-1:0,1", "worker-2:0,1", "worker-3:0,1"});
  CHECK(select("worker-0:1,3@worker-1", "", -1, 1) == Hosts{"worker-0:1", "worker-1:0"});
  CHECK(select("", "worker-3", 2, 3) == Hosts{"worker-0:0,1,2", "worker-1:0,1,2"});
}

TEST_CASE("asking for more nodes or GPUs than selected is an error stating both numbers") {
  CHECK(only_error("worker-0@worker-1", "", 3) ==
        "num_nodes is 3 but the selection has only 2 hosts");
  CHECK(only_error("", "", -1, 3) ==
        R"(num_gpus is 3 but host "worker-3" has only 2 selected slots)");
  CHECK(errors_of("", "worker-1:0,1,2", 5, 4) ==
        std::vector<std::string>{"num_nodes is 5 but the selection has only 4 hosts",
                                 R"(num_gpus is 4 but host "worker-1" has only 1 selected slot)"});
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
  CHECK_THAT(errors[1], Contains("num_nodes must be"));
  CHECK_THAT(errors[2], Contains("num_gpus must be"));
  CHECK_THAT(errors[3], Contains(R"(unknown host "nowhere")"));
  CHECK_THAT(errors[4], Contains(R"(host "worker-0" has no slot 9)"));
  CHECK_THAT(errors[5], Contains("exclude: empty host"));
}

TEST_CASE("a 16,384-host hostfile parses and filters well under 100 ms") {
  std::string text;
  std::string exclude;
  for (int i = 0; i < 16384; ++i) {
    text += "worker-" + std::to_string(i) + " slots=8\n";
    if (i % 2 == 1) exclude += "worker-" + std::to_string(i) + ":0,7@";
  }
  exclude.pop_back();
  const auto start = std::chrono::steady_clock::now();
  const auto parsed = parse_hostfile(text);
  const ResourceSelection selection = select_resources(parsed.hosts, "", exclude, 16000, 4);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE(parsed.errors.empty());
  REQUIRE(selection.errors.empty());
  REQUIRE(selection.hosts.size() == 16000);
  CHECK(rendered(selection)[0] == "worker-0:0,1,2,3");
  CHECK(rendered(selection)[1] == "worker-1:1,2,3,4");
  CHECK(elapsed < std::chrono::milliseconds(100));
}
