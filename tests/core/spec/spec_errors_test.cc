// How the spec reader's errors are printed when the spec is hostile: text
// from it cannot drive the terminal, and the number of lines is bounded.
#include <algorithm>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "tests/core/spec/spec_fixture.h"

namespace dslaunch::spec {
namespace {

using testing::Loaded;
using testing::SpecFolder;

size_t count_lines(const std::string& text) {
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("a terminal escape sequence in a spec key is printed escaped") {
  SpecFolder folder;
  const Loaded loaded = folder.load(R"(
data: {train: demo}
training:
  steps: 10
  "\e]0;owned\a\e[2J": 1
)");
  REQUIRE(loaded.errors().size() == 1);
  const std::string printed = loaded.diagnostics.format();
  INFO(printed);
  CHECK(printed.find('\x1b') == std::string::npos);
  CHECK(printed.find('\x07') == std::string::npos);
  CHECK(printed.find("unknown key '\\x1b]0;owned\\x07\\x1b[2J' in training") != std::string::npos);
}

TEST_CASE("thousands of unknown keys print the first 50 errors and a count of the rest") {
  std::string spec = "data: {train: demo}\ntraining:\n  steps: 10\n";
  constexpr int kUnknown = 5000;
  for (int i = 0; i < kUnknown; ++i) spec += fmt::format("  no_such_key_{}: 1\n", i);
  SpecFolder folder;
  const Loaded loaded = folder.load(spec);
  REQUIRE(loaded.errors().size() == kUnknown);
  const std::string printed = loaded.diagnostics.format();
  CHECK(count_lines(printed) == Diagnostics::kMaxFormatted + 1);
  CHECK(printed.find("no_such_key_0'") != std::string::npos);
  CHECK(printed.ends_with(fmt::format("... and {} more errors\n", kUnknown - 50)));
}

TEST_CASE("the count of what is left out names warnings apart from errors") {
  Diagnostics diagnostics;
  for (int i = 0; i < 51; ++i) diagnostics.error({"spec.yaml", 1, 1, ""}, "bad");
  diagnostics.warning({"spec.yaml", 2, 1, ""}, "odd");
  diagnostics.warning({"spec.yaml", 3, 1, ""}, "odd");
  const std::string printed = diagnostics.format();
  CHECK(count_lines(printed) == 51);
  CHECK(printed.ends_with("... and 1 more error and 2 more warnings\n"));
}

}  // namespace dslaunch::spec
