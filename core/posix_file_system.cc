#include "core/posix_file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "core/uring_file.h"

namespace dslaunch::core {
namespace {

class PosixWritableFile final : public WritableFile {
 public:
  explicit PosixWritableFile(int fd) : fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  int write_some(std::string_view data, size_t& written) override {
    while (true) {
      const ssize_t result = ::write(fd_, data.data(), data.size());
      if (result >= 0) {
        written = static_cast<size_t>(result);
        return 0;
      }
      if (errno != EINTR) return errno;
    }
  }

  int sync() override { return ::fsync(fd_) == 0 ? 0 : errno; }

  int close() override {
    // Linux releases the descriptor even when close() fails: never retried.
    return ::close(std::exchange(fd_, -1)) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace

namespace {

// Creates `path` new with exactly `mode` (open() applies the umask): the
// descriptor, or -1 with errno set.
int create_new(const std::string& path, mode_t mode) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  if (::fchmod(fd, mode) != 0) {
    const int failure = errno;
    ::close(fd);
    ::unlink(path.c_str());
    errno = failure;
    return -1;
  }
  return fd;
}

}  // namespace

int PosixFileSystem::create_file(const std::string& path, mode_t mode,
                                 std::unique_ptr<WritableFile>& file) {
  const int fd = create_new(path, mode);
  if (fd < 0) return errno;
  file = std::make_unique<PosixWritableFile>(fd);
  return 0;
}

int PosixFileSystem::create_large_file(const std::string& path, mode_t mode,
                                       std::unique_ptr<WritableFile>& file) {
  const int fd = create_new(path, mode);
  if (fd < 0) return errno;
  file = make_uring_writable_file(fd, LargeFileOptions{});
  return 0;
}

int PosixFileSystem::rename(const std::string& from, const std::string& to) {
  return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : errno;
}

int PosixFileSystem::sync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int result = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return result;
}

int PosixFileSystem::remove(const std::string& path) {
  return ::unlink(path.c_str()) == 0 ? 0 : errno;
}

int PosixFileSystem::make_folder(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) == 0) {
    // mkdir() applied the umask; the caller asked for `mode` exactly.
    return ::chmod(path.c_str(), mode) == 0 ? 0 : errno;
  }
  const int failure = errno;
  struct stat info {};
  if (failure == EEXIST && ::stat(path.c_str(), &info) == 0 && !S_ISDIR(info.st_mode)) {
    return ENOTDIR;
  }
  return failure;
}

}  // namespace dslaunch::core
