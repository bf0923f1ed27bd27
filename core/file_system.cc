#include "core/file_system.h"

#include <cerrno>
#include <filesystem>

#include <fmt/format.h>

#include "core/errno_status.h"
#include "core/posix_file_system.h"

namespace dslaunch::core {

int WritableFile::write_all(std::string_view data) {
  while (!data.empty()) {
    size_t written = 0;
    if (const int failure = write_some(data, written)) return failure;
    // A write that makes no progress would loop forever; a disk that takes
    // nothing is out of room.
    if (written == 0) return ENOSPC;
    data.remove_prefix(written);
  }
  return 0;
}

FileSystem& default_file_system() {
  static PosixFileSystem posix;
  return posix;
}

bool create_folders(FileSystem& fs, const std::string& path, mode_t mode, std::string& error) {
  size_t end = 0;
  while (end != std::string::npos) {
    end = path.find('/', end + 1);
    const std::string prefix = path.substr(0, end);
    if (prefix.empty() || prefix == "/" || prefix.back() == '/') continue;
    const int failure = fs.make_folder(prefix, mode);
    if (failure != 0 && failure != EEXIST) {
      error = fmt::format("cannot create folder '{}': {}", prefix, errno_text(failure));
      return false;
    }
  }
  return true;
}

std::string parent_folder(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace dslaunch::core
