#include "worker/data/atomic_file.h"

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

}  // namespace

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
