#include "core/faulty_file_system.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

namespace fs = std::filesystem;

std::string fresh_folder(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path folder = fs::path(tmp ? tmp : "/tmp") / "faulty_file_system_test" / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder.string();
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream content;
  content << file.rdbuf();
  return content.str();
}

// Creates `path` through `faulty` and writes `content` to it; 0 or the first error.
int write_new(FileSystem& faulty, const std::string& path, const std::string& content,
              bool sync) {
  std::unique_ptr<WritableFile> file;
  if (const int failure = faulty.create_file(path, 0600, file)) return failure;
  if (const int failure = file->write_all(content)) return failure;
  if (sync) {
    if (const int failure = file->sync()) return failure;
  }
  return file->close();
}

TEST_CASE("the nth call of a kind fails with the error asked for, and changes nothing") {
  const std::string dir = fresh_folder("fail");
  FaultyFileSystem faulty;
  faulty.fail(FileCall::kWrite, 2, ENOSPC);
  faulty.fail(FileCall::kRename, 1, EIO);
  std::unique_ptr<WritableFile> file;
  REQUIRE(faulty.create_file(dir + "/f", 0600, file) == 0);
  CHECK(file->write_all("first ") == 0);
  CHECK(file->write_all("second") == ENOSPC);
  CHECK(file->write_all("third") == 0);
  CHECK(file->close() == 0);
  CHECK(read_file(dir + "/f") == "first third");
  CHECK(faulty.calls(FileCall::kWrite) == 3);

  CHECK(faulty.rename(dir + "/f", dir + "/g") == EIO);
  CHECK(fs::exists(dir + "/f"));
  CHECK(faulty.rename(dir + "/f", dir + "/g") == 0);
  CHECK(read_file(dir + "/g") == "first third");
  CHECK_FALSE(faulty.crashed());
}

TEST_CASE("a short write takes half the bytes, and write_all finishes the rest") {
  const std::string dir = fresh_folder("short");
  FaultyFileSystem faulty;
  faulty.short_write(1);
  std::unique_ptr<WritableFile> file;
  REQUIRE(faulty.create_file(dir + "/f", 0600, file) == 0);
  size_t written = 0;
  CHECK(file->write_some("0123456789", written) == 0);
  CHECK(written == 5);
  CHECK(file->write_all("abcdef") == 0);
  CHECK(file->close() == 0);
  CHECK(read_file(dir + "/f") == "01234abcdef");
}

TEST_CASE("a link planted before a create makes it fail, and is not written through") {
  const std::string dir = fresh_folder("plant");
  std::ofstream(dir + "/victim") << "keep me";
  FaultyFileSystem faulty;
  faulty.plant_link(1, dir + "/victim");
  std::unique_ptr<WritableFile> file;
  CHECK(faulty.create_file(dir + "/f", 0600, file) == EEXIST);
  CHECK(fs::is_symlink(dir + "/f"));
  CHECK(read_file(dir + "/victim") == "keep me");
}

TEST_CASE("a crash stops every later call") {
  const std::string dir = fresh_folder("crash");
  FaultyFileSystem faulty;
  faulty.crash_before(FileCall::kSync, 1);
  std::unique_ptr<WritableFile> file;
  REQUIRE(faulty.create_file(dir + "/f", 0600, file) == 0);
  CHECK(file->write_all("data") == 0);
  CHECK_FALSE(faulty.crashed());
  CHECK(file->sync() == EIO);
  CHECK(faulty.crashed());
  CHECK(file->close() == EIO);
  CHECK(faulty.rename(dir + "/f", dir + "/g") == EIO);
  CHECK(faulty.remove(dir + "/f") == EIO);
  CHECK(fs::exists(dir + "/f"));
  CHECK_FALSE(fs::exists(dir + "/g"));
}

TEST_CASE("a power cut keeps a file's synced bytes, once its folder is synced") {
  const std::string dir = fresh_folder("power_cut");
  std::ofstream(dir + "/old") << "there before";
  FaultyFileSystem faulty;

  // Synced and named durably: kept, with only the bytes synced.
  std::unique_ptr<WritableFile> file;
  REQUIRE(faulty.create_file(dir + "/durable", 0600, file) == 0);
  REQUIRE(file->write_all("synced") == 0);
  REQUIRE(file->sync() == 0);
  REQUIRE(file->write_all(" and not") == 0);
  REQUIRE(file->close() == 0);
  // Named durably, never synced: empty.
  REQUIRE(write_new(faulty, dir + "/empty", "lost", false) == 0);
  REQUIRE(faulty.sync_folder(dir) == 0);
  // Synced, but its name never was: gone.
  REQUIRE(write_new(faulty, dir + "/unnamed", "synced", true) == 0);
  // Renamed over a file that was there, without the folder synced: the old one is back.
  REQUIRE(write_new(faulty, dir + "/new", "new", true) == 0);
  REQUIRE(faulty.rename(dir + "/new", dir + "/old") == 0);
  CHECK(read_file(dir + "/old") == "new");

  faulty.power_cut();
  CHECK(read_file(dir + "/durable") == "synced");
  CHECK(fs::exists(dir + "/empty"));
  CHECK(read_file(dir + "/empty").empty());
  CHECK_FALSE(fs::exists(dir + "/unnamed"));
  CHECK_FALSE(fs::exists(dir + "/new"));
  CHECK(read_file(dir + "/old") == "there before");
  CHECK(faulty.crashed());
}

TEST_CASE("a removal is undone by a power cut unless its folder was synced") {
  const std::string dir = fresh_folder("remove");
  std::ofstream(dir + "/a") << "a";
  std::ofstream(dir + "/b") << "b";
  FaultyFileSystem faulty;
  REQUIRE(faulty.remove(dir + "/a") == 0);
  REQUIRE(faulty.sync_folder(dir + "/") == 0);
  REQUIRE(faulty.remove(dir + "/b") == 0);
  faulty.power_cut();
  CHECK_FALSE(fs::exists(dir + "/a"));
  CHECK(read_file(dir + "/b") == "b");
}

}  // namespace
}  // namespace dslaunch::core
