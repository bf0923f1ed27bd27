#include "core/atomic_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/faulty_file_system.h"
#include "tests/worker/data/test_files.h"

namespace dslaunch::core {
namespace {

namespace fs = std::filesystem;
using worker::data::testing::read_bytes;
using worker::data::testing::TempDir;
using worker::data::testing::write_bytes;

mode_t mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

// The names in `dir`, sorted.
std::vector<std::string> names(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    found.push_back(entry.path().filename().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

TEST_CASE("an atomic write replaces the file with exactly its mode and leaves nothing else") {
  TempDir dir;
  const std::string path = dir.file("config.json");
  write_bytes(path, "old");
  std::string error;
  REQUIRE(write_file_atomically(path, "new", error));
  CHECK(read_bytes(path) == "new");
  CHECK(mode_of(path) == 0644);
  REQUIRE(write_file_atomically(path, "private", error, 0600));
  CHECK(mode_of(path) == 0600);
  CHECK(names(dir.path()) == std::vector<std::string>{"config.json"});
}

TEST_CASE("an atomic write syncs the folder, so the new file survives a power cut") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, "old weights");
  std::string error;
  SECTION("the folder synced: the new file stays") {
    FaultyFileSystem faulty;
    REQUIRE(write_file_atomically(path, "new weights", error, 0644, faulty));
    CHECK(faulty.calls(FileCall::kSyncFolder) == 1);
    faulty.power_cut();
    CHECK(read_bytes(path) == "new weights");
  }
  SECTION("the power goes before the folder is synced: the old file is back") {
    FaultyFileSystem faulty;
    faulty.crash_before(FileCall::kSyncFolder, 1);
    CHECK_FALSE(write_file_atomically(path, "new weights", error, 0644, faulty));
    CHECK(error == "'" + path + "' is written but its folder '" + dir.path() +
                       "' cannot be synced: Input/output error");
    faulty.power_cut();
    CHECK(read_bytes(path) == "old weights");
  }
  CHECK(names(dir.path()) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("a failed atomic write keeps the old file, leaves no temporary file and says why") {
  TempDir dir;
  const std::string path = dir.file("weights.bin");
  write_bytes(path, "old");
  const std::string content(1000, 'x');
  FaultyFileSystem faulty;
  std::string error;
  std::string reason;
  SECTION("ENOSPC at the second write, after a short first one") {
    faulty.short_write(1);
    faulty.fail(FileCall::kWrite, 2, ENOSPC);
    reason = "No space left on device";
  }
  SECTION("EIO on fsync") {
    faulty.fail(FileCall::kSync, 1, EIO);
    reason = "Input/output error";
  }
  SECTION("a late error on close") {
    faulty.fail(FileCall::kClose, 1, EIO);
    reason = "Input/output error";
  }
  CHECK_FALSE(write_file_atomically(path, content, error, 0644, faulty));
  INFO(error);
  CHECK(std::regex_match(error, std::regex("cannot write '" + path +
                                           R"(\.tmp\.[A-Za-z0-9]{6}': )" + reason)));
  CHECK(read_bytes(path) == "old");
  CHECK(names(dir.path()) == std::vector<std::string>{"weights.bin"});
}

TEST_CASE("content produced a piece at a time is written whole, or not at all") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_bytes(path, "old");
  std::string error;
  // Three pieces; the file is the three in order.
  REQUIRE(write_file_atomically(
      path,
      [](core::WritableFile& file, std::string&) {
        for (const char* piece : {"header", "|tensor 1", "|tensor 2"}) {
          if (const int failure = file.write_all(piece)) return failure;
        }
        return 0;
      },
      error));
  CHECK(read_bytes(path) == "header|tensor 1|tensor 2");
  // A producer that fails after its first piece: the old file stays.
  CHECK_FALSE(write_file_atomically(
      path,
      [](core::WritableFile& file, std::string&) {
        if (const int failure = file.write_all("partial")) return failure;
        return ENOSPC;
      },
      error));
  CHECK_THAT(error, Catch::Contains("No space left on device"));
  CHECK(read_bytes(path) == "header|tensor 1|tensor 2");
  // One failing in what it reads says so.
  CHECK_FALSE(write_file_atomically(
      path,
      [](core::WritableFile& file, std::string& own) {
        if (const int failure = file.write_all("partial")) return failure;
        own = "reading the swapped parameters: Input/output error";
        return -1;
      },
      error));
  CHECK_THAT(error, Catch::Contains("': reading the swapped parameters: Input/output error"));
  CHECK(read_bytes(path) == "header|tensor 1|tensor 2");
  CHECK(names(dir.path()) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("a short write is finished, not taken for the whole") {
  TempDir dir;
  const std::string path = dir.file("a.txt");
  FaultyFileSystem faulty;
  faulty.short_write(1);
  faulty.short_write(2);
  std::string error;
  REQUIRE(write_file_atomically(path, "0123456789", error, 0644, faulty));
  CHECK(read_bytes(path) == "0123456789");
  CHECK(faulty.calls(FileCall::kWrite) == 3);
}

TEST_CASE("an atomic write passes over a link planted at its temporary name") {
  TempDir dir;
  const std::string victim = dir.file("victim");
  write_bytes(victim, "keep me");
  FaultyFileSystem faulty;
  faulty.plant_link(1, victim);
  std::string error;
  REQUIRE(write_file_atomically(dir.file("out"), "data", error, 0644, faulty));
  CHECK(read_bytes(dir.file("out")) == "data");
  CHECK(read_bytes(victim) == "keep me");
  CHECK(faulty.calls(FileCall::kCreate) == 2);
}

TEST_CASE("a durable replace removes a link left at its temporary name rather than follow it") {
  TempDir dir;
  const std::string victim = dir.file("victim");
  write_bytes(victim, "keep me");
  fs::create_symlink(victim, dir.file("state.json.tmp"));
  std::string error;
  REQUIRE(replace_file_durably(dir.path(), "state.json", "{}", 0600, error));
  CHECK(read_bytes(dir.file("state.json")) == "{}");
  CHECK(mode_of(dir.file("state.json")) == 0600);
  CHECK(read_bytes(victim) == "keep me");
  CHECK(names(dir.path()) == std::vector<std::string>{"state.json", "victim"});

  // Planted between the removal and the creation: refused.
  FaultyFileSystem faulty;
  faulty.plant_link(1, victim);
  CHECK_FALSE(replace_file_durably(dir.path(), "state.json", "[]", 0600, error, faulty));
  CHECK(error == "cannot write '" + dir.file("state.json.tmp") + "': File exists");
  CHECK(read_bytes(victim) == "keep me");
  CHECK(read_bytes(dir.file("state.json")) == "{}");
}

TEST_CASE("a durable replace that fails keeps the old file and leaves no temporary file") {
  TempDir dir;
  write_bytes(dir.file("state.json"), "old");
  FaultyFileSystem faulty;
  faulty.fail(FileCall::kWrite, 1, ENOSPC);
  std::string error;
  CHECK_FALSE(replace_file_durably(dir.path(), "state.json", "new", 0600, error, faulty));
  CHECK(error == "cannot write '" + dir.file("state.json.tmp") + "': No space left on device");
  CHECK(read_bytes(dir.file("state.json")) == "old");
  CHECK(names(dir.path()) == std::vector<std::string>{"state.json"});
}

TEST_CASE("sync_folder names the folder it cannot sync") {
  TempDir dir;
  std::string error;
  CHECK(sync_folder(dir.path(), error));
  CHECK_FALSE(sync_folder(dir.file("missing"), error));
  CHECK(error == "cannot sync folder '" + dir.file("missing") + "': No such file or directory");
}

}  // namespace
}  // namespace dslaunch::core
