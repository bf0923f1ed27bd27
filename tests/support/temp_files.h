#pragma once

// Scratch folders and whole-file reads and writes for tests.

#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::testing {

// A fresh folder under $TEST_TMPDIR (or /tmp), removed with its contents
// when the object goes.
class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }
  // The names of the files in the folder, sorted.
  std::vector<std::string> names() const;

 private:
  std::string path_;
};

// The whole file; fails the test on error.
std::string read_bytes(const std::string& path);
// Writes `bytes` to `path`, replacing it; fails the test on error.
void write_bytes(const std::string& path, std::string_view bytes);

}  // namespace dslaunch::testing
