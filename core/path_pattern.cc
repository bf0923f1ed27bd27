#include "core/path_pattern.h"

#include <glob.h>

namespace dslaunch::core {

bool has_wildcards(const std::string& path) {
  return path.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> matching_paths(const std::string& pattern) {
  if (!has_wildcards(pattern)) return {pattern};
  glob_t matches{};
  std::vector<std::string> paths;
  if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
    paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  }
  globfree(&matches);
  return paths;
}

}  // namespace dslaunch::core
