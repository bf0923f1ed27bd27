#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dslaunch::launcher {

struct CapturedOutput {
  int exit_code = -1;  // -1 when the program did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs `argv[0]` (looked up on PATH) with `argv`, without a shell, and waits
// for it. std::nullopt when the program cannot be started (not installed).
// Blocks; the child inherits nothing but stdout/stderr redirection.
std::optional<CapturedOutput> capture_output(const std::vector<std::string>& argv);

}  // namespace dslaunch::launcher
