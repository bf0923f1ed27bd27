#include "topology/hostfile.h"

#include <chrono>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

using Catch::Matchers::Contains;
using dslaunch::topology::LineError;
using dslaunch::topology::parse_hostfile;
using dslaunch::topology::ParsedHostfile;

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

TEST_CASE("host names are taken verbatim, including dots, digits and IP addresses") {
  const ParsedHostfile parsed =
      parse_hostfile("node01.cluster.example slots=8\n10.0.0.7 slots=2\nlocalhost slots=1\n");
  CHECK(parsed.errors.empty());
  CHECK(entries(parsed) == std::vector<std::string>{"node01.cluster.example slots=8 (line 1)",
                                                    "10.0.0.7 slots=2 (line 2)",
                                                    "localhost slots=1 (line 3)"});
}

TEST_CASE("a 16,384-host hostfile parses well under 100 ms") {
  std::string text;
  for (int i = 0; i < 16384; ++i) text += "worker-" + std::to_string(i) + " slots=8\n";
  const auto start = std::chrono::steady_clock::now();
  const ParsedHostfile parsed = parse_hostfile(text);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(parsed.errors.empty());
  REQUIRE(parsed.hosts.size() == 16384);
  CHECK(parsed.hosts.back().host == "worker-16383");
  CHECK(parsed.hosts.back().line == 16384);
  CHECK(elapsed < std::chrono::milliseconds(100));
}
