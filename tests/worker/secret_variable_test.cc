#include "worker/secret_variable.h"

#include <sys/wait.h>

#include <cstdlib>

#include <catch2/catch.hpp>

namespace dslaunch::worker {
namespace {

// Whether a child started now sees `name` in its environment.
bool child_sees(const char* name) {
  const int status = std::system((std::string("test -n \"${") + name + "+set}\"").c_str());
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status) == 0;
}

}  // namespace

TEST_CASE("a secret variable is read once and then gone from the environment") {
  setenv("DSL_TEST_SECRET", "s3cret-token", 1);
  REQUIRE(child_sees("DSL_TEST_SECRET"));
  CHECK(take_secret_variable("DSL_TEST_SECRET") == "s3cret-token");
  CHECK(std::getenv("DSL_TEST_SECRET") == nullptr);
  CHECK_FALSE(child_sees("DSL_TEST_SECRET"));
  CHECK(take_secret_variable("DSL_TEST_SECRET").empty());
}

TEST_CASE("an unset secret variable reads as empty") {
  unsetenv("DSL_TEST_NO_SECRET");
  CHECK(take_secret_variable("DSL_TEST_NO_SECRET").empty());
}

}  // namespace dslaunch::worker
