#include "core/spec/text_file.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "core/errno_status.h"

namespace dslaunch::spec {

std::optional<std::string> read_text_file(const std::string& path, const std::string& what,
                                          std::string& error) {
  namespace fs = std::filesystem;
  std::error_code status_error;
  const fs::file_status status = fs::status(path, status_error);
  if (status_error) {
    error = fmt::format("cannot read {} '{}': {}", what, path, status_error.message());
    return std::nullopt;
  }
  if (!fs::is_regular_file(status)) {
    error = fmt::format("cannot read {} '{}': not a regular file", what, path);
    return std::nullopt;
  }
  std::error_code size_error;
  const auto size = fs::file_size(path, size_error);
  if (!size_error && size > kMaxTextFileBytes) {
    error = fmt::format("cannot read {} '{}': {} bytes is more than the {} MiB allowed", what, path,
                        size, kMaxTextFileBytes >> 20);
    return std::nullopt;
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    error = fmt::format("cannot read {} '{}': {}", what, path, core::errno_text(errno));
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

}  // namespace dslaunch::spec
