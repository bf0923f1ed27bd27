#pragma once

#include <string_view>

namespace dslaunch {

// The release version (the top-level VERSION file), e.g. "0.1.0".
std::string_view version();

// The git commit the binary was built from: 12 hex digits, with "-dirty" when
// tracked files had uncommitted changes, or "unknown" outside a git checkout.
std::string_view git_commit();

// "<program> <version> (commit <git_commit>)", the --version line.
std::string version_line(std::string_view program);

}  // namespace dslaunch
