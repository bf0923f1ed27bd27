#pragma once

#include "core/file_system.h"

namespace dslaunch::core {

// FileSystem on the POSIX calls of this process. Stateless, so thread-safe;
// default_file_system() is one of these.
class PosixFileSystem final : public FileSystem {
 public:
  int create_file(const std::string& path, mode_t mode,
                  std::unique_ptr<WritableFile>& file) override;
  int create_large_file(const std::string& path, mode_t mode,
                        std::unique_ptr<WritableFile>& file) override;
  int rename(const std::string& from, const std::string& to) override;
  int sync_folder(const std::string& dir) override;
  int remove(const std::string& path) override;
  int make_folder(const std::string& path, mode_t mode) override;
};

}  // namespace dslaunch::core
