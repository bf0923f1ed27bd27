#include "tools/build_info/build_info.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <catch2/catch.hpp>

#include "tests/support/run_command.h"

using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

namespace {

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

TEST_CASE("version() is the VERSION file") {
  std::ifstream file(runfile("VERSION"));
  std::string expected;
  std::getline(file, expected);
  REQUIRE(!expected.empty());
  CHECK(dslaunch::version() == expected);
}

TEST_CASE("git_commit() is the checkout's HEAD, or unknown outside git") {
  // The VERSION runfile links back into the source tree, where git can tell.
  const auto source_dir = std::filesystem::canonical(runfile("VERSION")).parent_path();
  const auto head = run_command("git -C '" + source_dir.string() + "' rev-parse --short=12 HEAD");
  const std::string commit(dslaunch::git_commit());
  if (head.exit_code != 0) {
    CHECK(commit == "unknown");
    return;
  }
  CHECK(std::regex_match(commit, std::regex("[0-9a-f]{12}(-dirty)?")));
  CHECK(commit.substr(0, 12) == trimmed(head.output));
}

TEST_CASE("version_line() names the program, version and commit") {
  const std::string line = dslaunch::version_line("dsworker");
  CHECK(line == "dsworker " + std::string(dslaunch::version()) + " (commit " +
                    std::string(dslaunch::git_commit()) + ")");
}
