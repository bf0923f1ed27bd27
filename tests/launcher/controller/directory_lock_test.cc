#include "launcher/controller/directory_lock.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

namespace dslaunch::controller {
namespace {

TEST_CASE("a folder is locked by one holder at a time, who is named to the others") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      (std::filesystem::path(tmp ? tmp : "/tmp") / "directory_lock_test" / "job").string();
  std::filesystem::remove_all(dir);
  std::string error;
  std::optional<DirectoryLock> first = DirectoryLock::acquire(dir, error);  // creates the folder
  REQUIRE(first);
  CHECK(std::filesystem::is_regular_file(dir + "/.lock"));

  CHECK_FALSE(DirectoryLock::acquire(dir, error));
  CHECK(error == dir + " is in use by another dslaunch (pid " + std::to_string(getpid()) + ")");

  first.reset();
  error.clear();
  CHECK(DirectoryLock::acquire(dir, error));
  CHECK(error.empty());
}

}  // namespace
}  // namespace dslaunch::controller
