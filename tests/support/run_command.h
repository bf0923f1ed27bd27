#pragma once

#include <string>

namespace dslaunch::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string output;  // stdout and stderr, interleaved
};

// Runs `command` through /bin/sh and captures everything it prints.
CommandResult run_command(const std::string& command);

// The path of a data dependency of the test, as Bazel lays out runfiles
// (for example "launcher/dslaunch" or "VERSION").
std::string runfile(const std::string& workspace_relative_path);

}  // namespace dslaunch::testing
