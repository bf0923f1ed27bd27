#include "launcher/capture_output.h"

#include <chrono>

#include <catch2/catch.hpp>

using dslaunch::launcher::capture_output;
using namespace std::chrono_literals;

TEST_CASE("a program's output and exit code are captured") {
  const auto result = capture_output({"sh", "-c", "echo out; echo err >&2; exit 4"});
  REQUIRE(result);
  CHECK(result->exit_code == 4);
  CHECK_FALSE(result->timed_out);
  CHECK(result->output == "out\nerr\n");
}

TEST_CASE("a program still running at the deadline is killed") {
  const auto started = std::chrono::steady_clock::now();
  const auto result = capture_output({"sh", "-c", "echo before; exec sleep 30"}, 300ms);
  REQUIRE(result);
  CHECK(result->timed_out);
  CHECK(result->exit_code == -1);
  CHECK(result->output == "before\n");
  CHECK(std::chrono::steady_clock::now() - started < 5s);
}

TEST_CASE("a program that is not installed gives no result") {
  CHECK_FALSE(capture_output({"no-such-program-xyz"}));
}
