#include "launcher/controller/directory_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

namespace dslaunch::controller {
namespace {

mode_t mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

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

TEST_CASE("a folder made for a lock is private, its .lock too, and a planted link is refused") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path base =
      std::filesystem::path(tmp ? tmp : "/tmp") / "directory_lock_test" / "private";
  std::filesystem::remove_all(base);
  const std::string dir = (base / "jobs" / "job").string();
  std::string error;
  {
    std::optional<DirectoryLock> lock = DirectoryLock::acquire(dir, error);
    REQUIRE(lock);
    CHECK(mode_of((base / "jobs").string()) == 0700);
    CHECK(mode_of(dir) == 0700);
    CHECK(mode_of(dir + "/.lock") == 0600);
  }

  const std::string victim = (base / "victim").string();
  { std::ofstream(victim) << "keep me"; }
  std::filesystem::remove(dir + "/.lock");
  std::filesystem::create_symlink(victim, dir + "/.lock");
  CHECK_FALSE(DirectoryLock::acquire(dir, error));
  CHECK(error == "cannot open '" + dir + "/.lock': Too many levels of symbolic links");
  std::ifstream file(victim);
  CHECK(std::string(std::istreambuf_iterator<char>(file), {}) == "keep me");

  CHECK_FALSE(DirectoryLock::acquire(victim + "/job", error));
  CHECK(error == "cannot create folder '" + victim + "': Not a directory");
}

}  // namespace
}  // namespace dslaunch::controller
