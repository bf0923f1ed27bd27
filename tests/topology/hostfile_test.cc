#include "topology/hostfile.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using Catch::Matchers::Contains;
using dslaunch::topology::host_name_problem;
using dslaunch::topology::kMaxSlotsPerHost;
using dslaunch::topology::LineError;
using dslaunch::topology::parse_hostfile;
using dslaunch::topology::ParsedHostfile;
using dslaunch::topology::valid_host_name;

namespace {

// Entries as "host slots=N (line L)", so a mismatch prints readably.
std::vector<std::string> entries(const ParsedHostfile& parsed) {
  std::vector<std::string> out;
  for (const auto& entry : parsed.hosts) {
    out.push_back(entry.host + " slots=" + std::to_string(entry.slots) + " (line " +
                  std::to_string(entry.line) + ")");
  }
  return out;
}

std::vector<int> error_lines(const ParsedHostfile& parsed) {
  std::vector<int> lines;
  for (const LineError& error : parsed.errors) lines.push_back(error.line);
  return lines;
}

// The one error of a single-line hostfile, which must be on line 1.
std::string only_error(std::string_view text) {
  const ParsedHostfile parsed = parse_hostfile(text);
  REQUIRE(error_lines(parsed) == std::vector<int>{1});
  return parsed.errors[0].message;
}

}  // namespace

TEST_CASE("a DeepSpeed hostfile lists each host with its slots, in file order") {
  const ParsedHostfile parsed = parse_hostfile("worker-1 slots=4\nworker-2 slots=4\n");
  CHECK(parsed.errors.empty());
  CHECK(entries(parsed) ==
        std::vector<std::string>{"worker-1 slots=4 (line 1)", "worker-2 slots=4 (line 2)"});
}

TEST_CASE("blank lines, comments and surrounding blanks are ignored but still counted") {
  const ParsedHostfile parsed = parse_hostfile(
      "# GPU nodes\n"
      "\n"
      "  worker-0 slots=8  \n"
      "\tworker-1\tslots=2\t# half a node\n"
      "   \t \n"
      "worker-2 slots=1#no blank before the comment\n"
      "    # indented comment\n");
  CHECK(parsed.errors.empty());
  CHECK(entries(parsed) == std::vector<std::string>{"worker-0 slots=8 (line 3)",
                                                    "worker-1 slots=2 (line 4)",
                                                    "worker-2 slots=1 (line 6)"});
}

TEST_CASE("CRLF line endings and a last line without a newline are accepted") {
  const ParsedHostfile parsed = parse_hostfile("a slots=1\r\n# note\r\n\r\nb slots=2\r\nc slots=3");
  CHECK(parsed.errors.empty());
  CHECK(entries(parsed) ==
        std::vector<std::string>{"a slots=1 (line 1)", "b slots=2 (line 4)", "c slots=3 (line 5)"});
}

TEST_CASE("a host without slots is an error that says what to write") {
  const std::string message = only_error("worker-0\n");
  CHECK_THAT(message, Contains(R"(expected "hostname slots=N")"));
  CHECK_THAT(message, Contains(R"("worker-0 slots=N")"));
}

TEST_CASE("slots must be a whole number of at least 1") {
  for (const char* line : {"a slots=abc", "a slots=0", "a slots=-2", "a slots=4x",
                           "a slots=", "a slots=1.5", "a slots=+3", "a slots=99999999999"}) {
    INFO(line);
    const std::string message = only_error(line);
    CHECK_THAT(message, Contains(R"(expected "hostname slots=N")"));
    CHECK_THAT(message, Contains(">= 1"));
    CHECK_THAT(message, Contains(std::string(line).substr(2)));
  }
}

TEST_CASE("blanks around the equals sign, extra words or another key make a line malformed") {
  for (const char* line :
       {"a slots = 4", "a slots= 4", "a slots=4 gpus=4", "a gpus=4", "a b slots=4", "a Slots=4"}) {
    INFO(line);
    const std::string message = only_error(line);
    CHECK_THAT(message, Contains(R"(expected "hostname slots=N")"));
    CHECK_THAT(message, Contains(R"("a slots=N")"));
  }
  CHECK_THAT(only_error("a slots = 4"), Contains("no blanks around"));
}

TEST_CASE("a duplicate host is an error naming the line of its first declaration") {
  const ParsedHostfile parsed =
      parse_hostfile("worker-0 slots=4\n# spare\nworker-1 slots=4\nworker-0 slots=2\n");
  REQUIRE(error_lines(parsed) == std::vector<int>{4});
  CHECK_THAT(parsed.errors[0].message,
             Contains(R"(host "worker-0" is already declared on line 1)"));
  CHECK(entries(parsed) ==
        std::vector<std::string>{"worker-0 slots=4 (line 1)", "worker-1 slots=4 (line 3)"});
}

TEST_CASE("every error is reported in line order, and the valid hosts are still listed") {
  const ParsedHostfile parsed = parse_hostfile(
      "a slots=4\n"
      "b\n"
      "c slots=0\n"
      "\n"
      "a slots=4\n"
      "d slots=2\n"
      "e slots = 1\n"
      "a slots=1\n");
  CHECK(error_lines(parsed) == std::vector<int>{2, 3, 5, 7, 8});
  CHECK_THAT(parsed.errors[2].message, Contains("already declared on line 1"));
  CHECK_THAT(parsed.errors[4].message, Contains("already declared on line 1"));
  CHECK(entries(parsed) == std::vector<std::string>{"a slots=4 (line 1)", "d slots=2 (line 6)"});
}

TEST_CASE("a hostfile with no hosts is one error on line 0") {
  for (const char* text : {"", "\n\n", "# just a comment\n  # another\n", " \t\r\n"}) {
    INFO('"' << text << '"');
    const ParsedHostfile parsed = parse_hostfile(text);
    CHECK(parsed.hosts.empty());
    REQUIRE(error_lines(parsed) == std::vector<int>{0});
    CHECK_THAT(parsed.errors[0].message, Contains("hostfile lists no hosts"));
  }
}

TEST_CASE("a hostfile whose every entry is malformed reports those lines, not an empty file") {
  const ParsedHostfile parsed = parse_hostfile("a\n# comment\nb slots=x\n");
  CHECK(parsed.hosts.empty());
  CHECK(error_lines(parsed) == std::vector<int>{1, 3});
}

TEST_CASE("host names are taken verbatim, including dots, digits, underscores and IP addresses") {
  const ParsedHostfile parsed = parse_hostfile(
      "node01.cluster.example slots=8\n10.0.0.7 slots=2\nlocalhost slots=1\ngpu_node-7 slots=4\n");
  CHECK(parsed.errors.empty());
  CHECK(entries(parsed) == std::vector<std::string>{"node01.cluster.example slots=8 (line 1)",
                                                    "10.0.0.7 slots=2 (line 2)",
                                                    "localhost slots=1 (line 3)",
                                                    "gpu_node-7 slots=4 (line 4)"});
}

TEST_CASE("a host name with a character outside letters, digits, '-', '.' and '_' is an error") {
  const ParsedHostfile parsed = parse_hostfile(
      "ok slots=1\n"
      "a:b slots=1\n"
      "worker@2 slots=1\n"
      "worker-\xff slots=1\n"
      "n\xc3\xb6"
      "de slots=1\n"
      "a/b slots=1\n"
      "-oProxyCommand slots=1\n");
  REQUIRE(error_lines(parsed) == std::vector<int>{2, 3, 4, 5, 6, 7});
  CHECK(parsed.errors[0].message ==
        R"(host name "a:b" holds ":" (character 2), which separates hosts and slots in )"
        R"(include/exclude; a host name may hold only ASCII letters, digits, "-", "." and "_")");
  CHECK(parsed.errors[1].message ==
        R"(host name "worker@2" holds "@" (character 7), which separates hosts and slots in )"
        R"(include/exclude; a host name may hold only ASCII letters, digits, "-", "." and "_")");
  // Bytes that are not printable ASCII are written as \xNN, so the message is valid text.
  CHECK(parsed.errors[2].message ==
        R"(host name "worker-\xff" holds "\xff" (character 8); a host name may hold only ASCII )"
        R"(letters, digits, "-", "." and "_")");
  CHECK(parsed.errors[3].message ==
        R"(host name "n\xc3\xb6de" holds "\xc3" (character 2); a host name may hold only ASCII )"
        R"(letters, digits, "-", "." and "_")");
  CHECK_THAT(parsed.errors[4].message, Contains(R"(host name "a/b" holds "/" (character 2))"));
  CHECK(parsed.errors[5].message ==
        R"(host name "-oProxyCommand" starts with "-", which ssh and mpirun would read as an )"
        R"(option; start it with a letter or digit)");
  CHECK(entries(parsed) == std::vector<std::string>{"ok slots=1 (line 1)"});
}

TEST_CASE("a host name has at most 253 characters, and a longer one is quoted shortened") {
  const std::string longest(253, 'a');
  const ParsedHostfile ok = parse_hostfile(longest + " slots=1\n");
  CHECK(ok.errors.empty());
  REQUIRE(ok.hosts.size() == 1);
  CHECK(ok.hosts[0].host == longest);

  const ParsedHostfile too_long =
      parse_hostfile("x slots=1\n" + std::string(254, 'b') + " slots=1\n");
  REQUIRE(error_lines(too_long) == std::vector<int>{2});
  CHECK(too_long.errors[0].message == "host name \"" + std::string(32, 'b') +
                                          "...\" is 254 characters long; a host name has at most "
                                          "253");
}

TEST_CASE("valid_host_name accepts RFC 1123 names with underscores and nothing else") {
  for (const char* name : {"a", "worker-0", "node01.cluster.example", "10.0.0.7", "gpu_node_3",
                           "A-Z.09_", "0", "x-"}) {
    INFO(name);
    CHECK(valid_host_name(name));
    CHECK(host_name_problem(name).empty());
  }
  for (const std::string& name :
       {std::string(), std::string("a:b"), std::string("a@b"), std::string("a b"),
        std::string("a\tb"), std::string("a,b"), std::string("a[1]"), std::string("a=b"),
        std::string("-a"), std::string("a\xff"), std::string("a\0b", 3), std::string("fe80::1"),
        std::string(254, 'a')}) {
    INFO(name);
    CHECK_FALSE(valid_host_name(name));
    CHECK_THAT(host_name_problem(name), Contains("host name \""));
  }
  CHECK(valid_host_name(std::string(253, 'a')));
  CHECK(host_name_problem("") == R"(host name "" is empty; write a name such as "worker-0")");
}

TEST_CASE("a slot count above 65,536 is an error naming the line, not a slot list") {
  REQUIRE(kMaxSlotsPerHost == 65536);
  const ParsedHostfile parsed = parse_hostfile(
      "a slots=8\n"
      "b slots=2147483647\n"
      "c slots=65537\n"
      "d slots=65536\n");
  REQUIRE(error_lines(parsed) == std::vector<int>{2, 3});
  CHECK(parsed.errors[0].message ==
        R"("slots=2147483647" is more than the 65536 slots one host may have; write the host's )"
        R"(GPU count, for example "b slots=8")");
  CHECK_THAT(parsed.errors[1].message, Contains(R"("slots=65537" is more than the 65536 slots)"));
  CHECK(entries(parsed) ==
        std::vector<std::string>{"a slots=8 (line 1)", "d slots=65536 (line 4)"});
}

// How fast this is is measured by `bazel run //bench:hostfile_bench`; a unit
// test on a shared machine only checks the result.
TEST_CASE("a 16,384-host hostfile parses to every host in order") {
  std::string text;
  for (int i = 0; i < 16384; ++i) text += "worker-" + std::to_string(i) + " slots=8\n";
  const ParsedHostfile parsed = parse_hostfile(text);
  CHECK(parsed.errors.empty());
  REQUIRE(parsed.hosts.size() == 16384);
  CHECK(parsed.hosts[8191].host == "worker-8191");
  CHECK(parsed.hosts[8191].line == 8192);
  CHECK(parsed.hosts.back().host == "worker-16383");
  CHECK(parsed.hosts.back().slots == 8);
  CHECK(parsed.hosts.back().line == 16384);
}
