#include "core/uring_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/posix_file_system.h"

namespace dslaunch::core {
namespace {

namespace fs = std::filesystem;

// A fresh, empty folder for one test: under $TEST_TMPDIR (a disk, where
// O_DIRECT works) or /dev/shm (tmpfs, where it may not).
std::string fresh_folder(const fs::path& root, const std::string& name) {
  const fs::path folder = root / "uring_file_test" / name;
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder.string();
}

fs::path test_tmpdir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? fs::path(tmp) : fs::temp_directory_path();
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 engine(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(engine());
  return bytes;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::unique_ptr<WritableFile> open_new(const std::string& path, const LargeFileOptions& options) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  return make_uring_writable_file(fd, options);
}

// Writes `data` in pieces of varying sizes, as the shard writer's blocks
// and paddings come.
void write_in_pieces(WritableFile& file, const std::string& data, uint32_t seed) {
  std::mt19937 engine(seed);
  size_t at = 0;
  while (at < data.size()) {
    const size_t piece = std::min<size_t>(data.size() - at, 1 + engine() % 70000);
    REQUIRE(file.write_all(std::string_view(data).substr(at, piece)) == 0);
    at += piece;
  }
}

TEST_CASE("a large file holds exactly the bytes written, whatever their sizes and the block's") {
  const LargeFileOptions small_blocks{.block_bytes = 64 << 10, .queue_depth = 3};
  for (const fs::path& root : {test_tmpdir(), fs::path("/dev/shm")}) {
    const std::string folder = fresh_folder(root, "sizes");
    const int64_t block = small_blocks.block_bytes;
    for (const int64_t size : {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{4096}, int64_t{4097},
                               block - 1, block, block + 1, 7 * block + 12345}) {
      INFO(root << ", " << size << " bytes");
      const std::string path = folder + "/" + std::to_string(size);
      const std::string data = random_bytes(static_cast<size_t>(size), static_cast<uint32_t>(size));
      std::unique_ptr<WritableFile> file = open_new(path, small_blocks);
      INFO("O_DIRECT " << large_file_mode(*file).direct << ", io_uring "
                       << large_file_mode(*file).io_uring);
      write_in_pieces(*file, data, 7);
      REQUIRE(file->sync() == 0);
      REQUIRE(file->close() == 0);
      CHECK(fs::file_size(path) == static_cast<uintmax_t>(size));
      CHECK(read_all(path) == data);
    }
  }
}

TEST_CASE("writing on after a sync rewrites the padded tail block in place") {
  const LargeFileOptions options{.block_bytes = 16 << 10, .queue_depth = 2};
  const std::string path = fresh_folder(test_tmpdir(), "resync") + "/file";
  const std::string data = random_bytes(50000, 3);
  std::unique_ptr<WritableFile> file = open_new(path, options);
  REQUIRE(file->write_all(std::string_view(data).substr(0, 5000)) == 0);
  REQUIRE(file->sync() == 0);
  CHECK(fs::file_size(path) == 5000);
  CHECK(read_all(path) == data.substr(0, 5000));
  REQUIRE(file->write_all(std::string_view(data).substr(5000)) == 0);
  REQUIRE(file->sync() == 0);
  REQUIRE(file->close() == 0);
  CHECK(read_all(path) == data);
}

TEST_CASE("the file system's large files go through io_uring and O_DIRECT on a disk") {
  const std::string path = fresh_folder(test_tmpdir(), "posix") + "/shard";
  PosixFileSystem posix;
  std::unique_ptr<WritableFile> file;
  REQUIRE(posix.create_large_file(path, 0640, file) == 0);
  const LargeFileMode mode = large_file_mode(*file);
  // Either can be missing (a file system without O_DIRECT, a seccomp filter
  // without io_uring): then the writes fall back, and say so.
  if (!mode.io_uring) WARN("io_uring is not available here: blocks are written with pwrite");
  if (!mode.direct) WARN("O_DIRECT is not available under " << test_tmpdir());
  const std::string data = random_bytes(20 << 20, 11);
  write_in_pieces(*file, data, 5);
  REQUIRE(file->sync() == 0);
  REQUIRE(file->close() == 0);
  CHECK(read_all(path) == data);
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  // Like create_file: an existing name is never written through.
  std::unique_ptr<WritableFile> again;
  CHECK(posix.create_large_file(path, 0600, again) == EEXIST);
}

TEST_CASE("a write the disk refuses is reported by the next call and sticks") {
  // /dev/full refuses every write with ENOSPC.
  const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::unique_ptr<WritableFile> file =
      make_uring_writable_file(fd, {.block_bytes = 4096, .queue_depth = 2});
  const std::string data = random_bytes(64 << 10, 1);
  const int failure = file->write_all(data);
  const int synced = file->sync();
  CHECK((failure == ENOSPC || synced == ENOSPC));
  CHECK(synced == ENOSPC);
  size_t written = 0;
  CHECK(file->write_some("more", written) == ENOSPC);
  CHECK(file->close() == ENOSPC);
}

}  // namespace
}  // namespace dslaunch::core
