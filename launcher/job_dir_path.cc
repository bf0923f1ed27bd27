#include "launcher/job_dir_path.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace dslaunch::launcher {

std::optional<std::string> normalized_job_dir(const std::string& dir, std::string& error) {
  if (dir.empty()) {
    error = "the job directory is empty; give a folder such as ./my-job (its name is the job id)";
    return std::nullopt;
  }
  std::error_code failed;
  const std::filesystem::path absolute = std::filesystem::absolute(dir, failed);
  if (failed) {
    error = fmt::format("cannot make '{}' an absolute path: {}", dir, failed.message());
    return std::nullopt;
  }
  std::string normal = absolute.lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  if (normal == "/") {
    error = fmt::format(
        "'{}' is the root folder, which cannot be a job directory: its name is the job id; give "
        "a folder such as /tmp/my-job",
        dir);
    return std::nullopt;
  }
  return normal;
}

}  // namespace dslaunch::launcher
