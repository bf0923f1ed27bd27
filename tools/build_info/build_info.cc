#include "tools/build_info/build_info.h"

#include <string>

#include "tools/build_info/stamp.h"

namespace dslaunch {

std::string_view version() { return kStampedVersion; }

std::string_view git_commit() { return kStampedGitCommit; }

std::string version_line(std::string_view program) {
  return std::string(program) + " " + std::string(version()) + " (commit " +
         std::string(git_commit()) + ")";
}

}  // namespace dslaunch
