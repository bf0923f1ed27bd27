#include "tests/support/run_command.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace dslaunch::testing {

CommandResult run_command(const std::string& command) {
  CommandResult result;
  const std::string merged = command + " 2>&1";
  FILE* pipe = popen(merged.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed for: " + command);
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

std::string runfile(const std::string& workspace_relative_path) {
  const char* dir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (dir == nullptr || workspace == nullptr) {
    throw std::runtime_error("TEST_SRCDIR/TEST_WORKSPACE unset: run this test with bazel test");
  }
  return std::string(dir) + "/" + workspace + "/" + workspace_relative_path;
}

}  // namespace dslaunch::testing
