#include "tests/fuzz/fuzz_support.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace dslaunch::fuzz {
namespace fs = std::filesystem;

const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder runs after
  // static destructors would have.
  static const std::string* const path = [] {
    std::string name = "/tmp/dslaunch-fuzz-scratch-XXXXXX";
    require(::mkdtemp(name.data()) != nullptr);
    std::atexit([] {
      std::error_code ignored;
      fs::remove_all(scratch_dir(), ignored);
    });
    return new std::string(name);
  }();
  return *path;
}

void clear_scratch_dir() {
  for (const auto& entry : fs::directory_iterator(scratch_dir())) fs::remove_all(entry.path());
}

std::string write_scratch_file(const std::string& name, std::string_view bytes) {
  const fs::path path = fs::path(scratch_dir()) / name;
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  require(out.good());
  return path.string();
}

}  // namespace dslaunch::fuzz
