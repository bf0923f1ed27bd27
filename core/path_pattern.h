#pragma once

#include <string>
#include <vector>

namespace dslaunch::core {

// Whether `path` holds a glob wildcard (*, ? or [).
bool has_wildcards(const std::string& path);

// The paths a glob pattern matches, in sorted order (as glob(3) sorts
// them); `pattern` itself when it holds no wildcard, whether or not it
// exists; empty when a pattern matches nothing.
std::vector<std::string> matching_paths(const std::string& pattern);

}  // namespace dslaunch::core
