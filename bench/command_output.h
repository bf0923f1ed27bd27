#pragma once

// Running a reference program from a benchmark (PyTorch, dd) and reading
// what it prints.

#include <array>
#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dslaunch::bench {

struct CommandOutput {
  std::string text;  // stdout (redirect stderr in the command to have it too)
  int status = -1;   // pclose's; -1 when the command could not start
};

inline CommandOutput run_command(const std::string& command) {
  CommandOutput output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output.text += buffer.data();
  output.status = pclose(pipe);
  return output;
}

// The last JSON object `command` prints; nullopt with `error` set (the start
// of its output) when it fails or prints none.
inline std::optional<nlohmann::json> last_json_object(const std::string& command,
                                                      std::string& error) {
  const CommandOutput output = run_command(command);
  const size_t brace = output.text.rfind('{');
  if (output.status == 0 && brace != std::string::npos) {
    nlohmann::json parsed = nlohmann::json::parse(output.text.substr(brace), nullptr, false);
    if (parsed.is_object()) return parsed;
  }
  error = output.status == -1 ? "cannot start: " + command : output.text.substr(0, 2000);
  return std::nullopt;
}

}  // namespace dslaunch::bench
