#pragma once

#include <cstdlib>
#include <string>

namespace dslaunch::bench {

// Where a data file of a benchmark run with `bazel run` (or straight from
// bazel-bin) lies: under RUNFILES_DIR, or beside the binary.
inline std::string runfile(const char* argv0, const std::string& path) {
  if (const char* dir = std::getenv("RUNFILES_DIR")) return std::string(dir) + "/dslaunch/" + path;
  return std::string(argv0) + ".runfiles/dslaunch/" + path;
}

}  // namespace dslaunch::bench
