#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dslaunch::launcher {

struct CapturedOutput {
  int exit_code = -1;      // -1 when the program did not exit normally
  bool timed_out = false;  // killed at the deadline
  std::string output;      // stdout and stderr together
};

// Runs `argv[0]` (looked up on PATH) with `argv`, without a shell, and waits
// for it, at most `timeout`: a program still running then (such as
// nvidia-smi on a wedged driver) is killed. std::nullopt when the program
// cannot be started (not installed). Blocks.
std::optional<CapturedOutput> capture_output(
    const std::vector<std::string>& argv,
    std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace dslaunch::launcher
