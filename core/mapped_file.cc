#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include <fmt/format.h>

#include "core/errno_status.h"

namespace dslaunch::core {

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      bytes_(std::exchange(other.bytes_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    bytes_ = std::exchange(other.bytes_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (bytes_ != nullptr) ::munmap(const_cast<uint8_t*>(bytes_), static_cast<size_t>(size_));
  bytes_ = nullptr;
  size_ = 0;
}

bool MappedFile::open(const std::string& path, std::string& error) {
  unmap();
  path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("cannot open '{}': {}", path, errno_text(errno));
    return false;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    error = fmt::format("cannot read '{}': {}", path, errno_text(errno));
    ::close(fd);
    return false;
  }
  if (!S_ISREG(info.st_mode)) {
    error = fmt::format("'{}' is not a regular file", path);
    ::close(fd);
    return false;
  }
  if (info.st_size > 0) {
    void* mapping =
        ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (mapping == MAP_FAILED) {
      error = fmt::format("cannot map '{}' into memory: {}", path, errno_text(errno));
      ::close(fd);
      return false;
    }
    bytes_ = static_cast<const uint8_t*>(mapping);
    size_ = info.st_size;
  }
  ::close(fd);  // the mapping keeps the file open
  return true;
}

}  // namespace dslaunch::core
