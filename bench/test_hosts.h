#pragma once

// What the benchmarks on test hosts (tools/testhosts.sh, root) share: the
// runfiles they start, a shell that throws on failure, and the hosts.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace dslaunch::bench {

inline std::filesystem::path runfiles_root() {
  if (const char* dir = std::getenv("RUNFILES_DIR")) return std::filesystem::path(dir) / "dslaunch";
  return std::filesystem::path(std::filesystem::read_symlink("/proc/self/exe").string() +
                               ".runfiles") /
         "dslaunch";
}

inline std::string runfile(const std::string& path) { return (runfiles_root() / path).string(); }

// Runs `command` through the shell; its output, or an exception when it fails.
inline std::string shell(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  if (pclose(pipe) != 0) throw std::runtime_error(fmt::format("{} failed:\n{}", command, output));
  return output;
}

inline std::string testhosts(const std::string& args) {
  return shell(runfile("tools/testhosts.sh") + " " + args);
}

// Makes `count` test hosts of `slots` slots; the path of their hostfile.
inline std::string hosts_up(int count, int slots = 2) {
  std::istringstream lines(testhosts(fmt::format("up {} --slots {}", count, slots)));
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) last = line;
  }
  return last;
}

// The CPU's model name, as /proc/cpuinfo gives it.
inline std::string cpu_model() {
  std::ifstream file("/proc/cpuinfo");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

}  // namespace dslaunch::bench
