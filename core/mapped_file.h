#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::core {

// A whole file mapped read-only into memory. Movable, not copyable; the
// mapping lives as long as the object. Concurrent reads of bytes() are safe.
// The file must not be truncated while mapped (reads past its new end fault).
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Maps `path`; on failure returns false and sets `error` to a sentence that
  // names the file and the reason. An empty file maps to size() == 0.
  bool open(const std::string& path, std::string& error);

  const uint8_t* bytes() const { return bytes_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void unmap();

  std::string path_;
  const uint8_t* bytes_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace dslaunch::core
