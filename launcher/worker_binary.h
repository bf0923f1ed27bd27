#pragma once

#include <string>

namespace dslaunch::launcher {

// The dsworker executable: `requested` when given, else $DSLAUNCH_WORKER,
// else dsworker beside this binary (an installation), else
// ../worker/dsworker (Bazel's output tree); "" when none is executable.
std::string find_worker_binary(const std::string& requested);

}  // namespace dslaunch::launcher
