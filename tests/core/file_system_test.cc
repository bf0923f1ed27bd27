#include "core/file_system.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "core/posix_file_system.h"

namespace dslaunch::core {
namespace {

namespace fs = std::filesystem;

// A fresh, empty folder under $TEST_TMPDIR for one test.
std::string fresh_folder(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path folder = fs::path(tmp ? tmp : "/tmp") / "file_system_test" / name;
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

mode_t mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

// Sets the umask for one scope.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old_); }

 private:
  mode_t old_;
};

// A WritableFile that takes at most `limit` bytes a call, and nothing once
// `capacity` bytes are in.
class TrickleFile final : public WritableFile {
 public:
  TrickleFile(size_t limit, size_t capacity) : limit_(limit), capacity_(capacity) {}
  int write_some(std::string_view data, size_t& written) override {
    written = std::min({data.size(), limit_, capacity_ - content.size()});
    content.append(data.substr(0, written));
    return 0;
  }
  int sync() override { return 0; }
  int close() override { return 0; }
  std::string content;

 private:
  size_t limit_;
  size_t capacity_;
};

TEST_CASE("a file is created new, with exactly its mode, written, synced and closed") {
  const std::string dir = fresh_folder("create");
  const std::string path = dir + "/file";
  PosixFileSystem posix;
  std::unique_ptr<WritableFile> file;
  {
    const ScopedUmask umask(0077);
    REQUIRE(posix.create_file(path, 0644, file) == 0);
  }
  CHECK(mode_of(path) == 0644);
  REQUIRE(file->write_all("hello, ") == 0);
  REQUIRE(file->write_all("disk") == 0);
  CHECK(file->sync() == 0);
  CHECK(file->close() == 0);
  CHECK(read_file(path) == "hello, disk");

  std::unique_ptr<WritableFile> again;
  CHECK(posix.create_file(path, 0600, again) == EEXIST);
  CHECK_FALSE(again);
  CHECK(read_file(path) == "hello, disk");
}

TEST_CASE("a link planted at a new file's name is not followed") {
  const std::string dir = fresh_folder("symlink");
  const std::string target = dir + "/precious";
  std::ofstream(target) << "keep me";
  fs::create_symlink(target, dir + "/file.tmp");
  fs::create_symlink(dir + "/nowhere", dir + "/dangling.tmp");
  PosixFileSystem posix;
  std::unique_ptr<WritableFile> file;
  CHECK(posix.create_file(dir + "/file.tmp", 0600, file) == EEXIST);
  CHECK(posix.create_file(dir + "/dangling.tmp", 0600, file) == EEXIST);
  CHECK(read_file(target) == "keep me");
  CHECK_FALSE(fs::exists(dir + "/nowhere"));
}

TEST_CASE("rename, remove and sync_folder report errno values") {
  const std::string dir = fresh_folder("calls");
  PosixFileSystem posix;
  std::ofstream(dir + "/a") << "a";
  CHECK(posix.rename(dir + "/a", dir + "/b") == 0);
  CHECK(read_file(dir + "/b") == "a");
  CHECK(posix.rename(dir + "/a", dir + "/b") == ENOENT);
  CHECK(posix.sync_folder(dir) == 0);
  CHECK(posix.sync_folder(dir + "/missing") == ENOENT);
  CHECK(posix.remove(dir + "/b") == 0);
  CHECK(posix.remove(dir + "/b") == ENOENT);
}

TEST_CASE("a folder is made with exactly its mode; one already there is left as it is") {
  const std::string dir = fresh_folder("folders");
  PosixFileSystem posix;
  {
    const ScopedUmask umask(0077);
    CHECK(posix.make_folder(dir + "/open", 0755) == 0);
  }
  CHECK(mode_of(dir + "/open") == 0755);
  CHECK(posix.make_folder(dir + "/open", 0700) == EEXIST);
  CHECK(mode_of(dir + "/open") == 0755);
  std::ofstream(dir + "/file") << "";
  CHECK(posix.make_folder(dir + "/file", 0700) == ENOTDIR);
  CHECK(posix.make_folder(dir + "/missing/deeper", 0700) == ENOENT);
}

TEST_CASE("create_folders makes every missing folder and names the one it cannot make") {
  const std::string dir = fresh_folder("create_folders");
  std::string error;
  REQUIRE(create_folders(default_file_system(), dir + "/a/b//c/", 0700, error));
  CHECK(fs::is_directory(dir + "/a/b/c"));
  CHECK(mode_of(dir + "/a") == 0700);
  CHECK(mode_of(dir + "/a/b/c") == 0700);
  REQUIRE(create_folders(default_file_system(), dir + "/a/b/c", 0700, error));

  std::ofstream(dir + "/a/file") << "";
  CHECK_FALSE(create_folders(default_file_system(), dir + "/a/file/d", 0700, error));
  CHECK(error == "cannot create folder '" + dir + "/a/file': Not a directory");
}

TEST_CASE("write_all goes on after short writes, and a disk that takes nothing is full") {
  TrickleFile trickle(3, 100);
  CHECK(trickle.write_all("0123456789") == 0);
  CHECK(trickle.content == "0123456789");

  TrickleFile full(3, 4);
  CHECK(full.write_all("0123456789") == ENOSPC);
  CHECK(full.content == "0123");
}

TEST_CASE("parent_folder is the folder to sync for a file") {
  CHECK(parent_folder("/a/b/c.json") == "/a/b");
  CHECK(parent_folder("/c.json") == "/");
  CHECK(parent_folder("c.json") == ".");
  CHECK(parent_folder("a/c.json") == "a");
}

}  // namespace
}  // namespace dslaunch::core
