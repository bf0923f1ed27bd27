#include "launcher/controller/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "core/errno_status.h"
#include "core/file_system.h"

namespace dslaunch::controller {

std::optional<DirectoryLock> DirectoryLock::acquire(const std::string& dir, std::string& error) {
  // The first to lock a job directory or checkpoint folder usually makes it:
  // private to the user, as everything dslaunch writes for a job is.
  if (!core::create_folders(core::default_file_system(), dir, 0700, error)) return std::nullopt;
  const std::string path = (std::filesystem::path(dir) / ".lock").string();
  // The file is reused from run to run (never O_EXCL), but a link planted at
  // its name is not followed: the pid below would be written through it.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    error = fmt::format("cannot open '{}': {}", path, core::errno_text(errno));
    return std::nullopt;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int reason = errno;
    char holder[32] = {};
    const ssize_t got = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    error = reason == EWOULDBLOCK
                ? fmt::format("{} is in use by another dslaunch (pid {})", dir,
                              got > 0 ? std::string(holder, static_cast<size_t>(got)) : "unknown")
                : fmt::format("cannot lock '{}': {}", path, core::errno_text(reason));
    return std::nullopt;
  }
  // The pid only serves a second dslaunch's message: the lock holds without it.
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  return DirectoryLock(fd);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace dslaunch::controller
