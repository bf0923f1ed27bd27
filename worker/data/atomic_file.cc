#include "worker/data/atomic_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace dslaunch::worker::data {
namespace {

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

std::string join(const std::string& dir, std::string_view name) {
  return dir == "/" ? fmt::format("/{}", name) : fmt::format("{}/{}", dir, name);
}

}  // namespace

bool sync_folder(const std::string& dir, std::string& error) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  const int sync_errno = errno;
  if (fd >= 0) ::close(fd);
  if (!synced) error = fmt::format("cannot sync folder '{}': {}", dir, std::strerror(sync_errno));
  return synced;
}

bool replace_file_durably(const std::string& dir, std::string_view name, std::string_view content,
                          mode_t mode, std::string& error) {
  const std::string path = join(dir, name);
  const std::string temporary = path + ".tmp";
  if (::unlink(temporary.c_str()) != 0 && errno != ENOENT) {
    error = fmt::format("cannot remove stale '{}': {}", temporary, std::strerror(errno));
    return false;
  }
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    error = fmt::format("cannot write '{}': {}", temporary, std::strerror(errno));
    return false;
  }
  const bool written = ::fchmod(fd, mode) == 0 && write_all(fd, content) && ::fsync(fd) == 0;
  const int write_errno = errno;
  // close() reports late write errors (NFS does).
  if (::close(fd) != 0 || !written) {
    error = fmt::format("cannot write '{}': {}", temporary,
                        std::strerror(written ? errno : write_errno));
    ::unlink(temporary.c_str());
    return false;
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    error = fmt::format("cannot rename '{}' to '{}': {}", temporary, path, std::strerror(errno));
    ::unlink(temporary.c_str());
    return false;
  }
  return sync_folder(dir, error);
}

bool write_file_atomically(const std::string& path, std::string_view content, std::string& error) {
  // mkstemp makes the name unique, so concurrent writers never share a temporary file.
  std::string temporary_name = path + ".tmp.XXXXXX";
  std::vector<char> name_buffer(temporary_name.begin(), temporary_name.end());
  name_buffer.push_back('\0');
  const int fd = ::mkstemp(name_buffer.data());
  if (fd < 0) {
    error = fmt::format("cannot write '{}': cannot create a temporary file beside it: {}", path,
                        std::strerror(errno));
    return false;
  }
  temporary_name = name_buffer.data();
  const bool written = ::fchmod(fd, 0644) == 0 && write_all(fd, content) && ::fsync(fd) == 0;
  const int write_errno = errno;
  if (::close(fd) != 0 || !written) {
    error = fmt::format("cannot write '{}': {}", temporary_name,
                        std::strerror(written ? errno : write_errno));
    ::unlink(temporary_name.c_str());
    return false;
  }
  if (::rename(temporary_name.c_str(), path.c_str()) != 0) {
    error =
        fmt::format("cannot rename '{}' to '{}': {}", temporary_name, path, std::strerror(errno));
    ::unlink(temporary_name.c_str());
    return false;
  }
  return true;
}

}  // namespace dslaunch::worker::data
