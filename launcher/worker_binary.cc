#include "launcher/worker_binary.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace dslaunch::launcher {

namespace fs = std::filesystem;

std::string find_worker_binary(const std::string& requested) {
  if (!requested.empty()) return fs::absolute(requested).string();
  if (const char* from_env = std::getenv("DSLAUNCH_WORKER")) return from_env;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  for (const fs::path& candidate : {self.parent_path() / "dsworker",
                                    self.parent_path().parent_path() / "worker" / "dsworker"}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

}  // namespace dslaunch::launcher
