#include "core/monitor/csv_monitor.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "core/errno_status.h"

namespace dslaunch::core {
namespace {

std::string file_name(std::string_view tag) {
  std::string name(tag);
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  return name + ".csv";
}

}  // namespace

Status CsvMonitor::add(std::string_view tag, int64_t step, double value) {
  const std::string path = (std::filesystem::path(dir_) / file_name(tag)).string();
  const bool first = !seen_.contains(path);
  if (first) {
    std::error_code error;
    std::filesystem::create_directories(dir_, error);
    if (error) {
      return Status(
          StatusCode::kFailedPrecondition,
          fmt::format("cannot create the csv_monitor folder '{}': {}", dir_, error.message()));
    }
  }
  // DeepSpeed appends: a resumed job goes on with the same files.
  const std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "a"), &std::fclose);
  if (!file) return errno_status(errno, fmt::format("cannot open '{}' for appending", path));
  std::string text;
  if (first && std::ftell(file.get()) == 0) {
    const size_t slash = tag.rfind('/');
    text += fmt::format("step,{}\n", slash == std::string_view::npos ? tag : tag.substr(slash + 1));
  }
  seen_.insert(path);
  text += fmt::format("{},{}\n", step, value);
  if (std::fwrite(text.data(), 1, text.size(), file.get()) != text.size() ||
      std::fflush(file.get()) != 0) {
    return errno_status(errno, fmt::format("cannot append to '{}'", path));
  }
  return {};
}

}  // namespace dslaunch::core
