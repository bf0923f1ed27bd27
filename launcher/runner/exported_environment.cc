#include "launcher/runner/exported_environment.h"

#include <fstream>

#include <fmt/format.h>

namespace dslaunch::runner {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (const char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool exported_name(const std::string& name) {
  if (name == "CUDA_VISIBLE_DEVICES") return false;
  for (const std::string& prefix : kExportedPrefixes) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

bool read_env_file(const std::string& path, std::map<std::string, std::string>& out,
                   std::string& error) {
  std::ifstream file(path);
  if (!file) return true;  // no such file: nothing to add
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t equals = line.find('=');
    const std::string name = equals == std::string::npos ? "" : line.substr(0, equals);
    if (!valid_name(name)) {
      error = fmt::format(
          "{}:{}: error: expected NAME=VALUE (a variable for every rank, as DeepSpeed's "
          ".deepspeed_env holds), not '{}'",
          path, number, line.substr(0, 80));
      return false;
    }
    out[name] = line.substr(equals + 1);
  }
  if (file.bad()) {
    error = fmt::format("cannot read '{}'", path);
    return false;
  }
  return true;
}

}  // namespace

const std::vector<std::string> kExportedPrefixes = {
    "MLFLOW",  "NCCL",  "PYTHON", "MV2",   "UCX", "OMP_", "KMP_", "OPENBLAS_",
    "ONEDNN_", "DNNL_", "CUDA_",  "DSLAUNCH_LOG_LEVEL"};

std::vector<std::string> deepspeed_env_files(const char* home, const char* ds_env_file) {
  const std::string name =
      ds_env_file != nullptr && *ds_env_file != '\0' ? ds_env_file : ".deepspeed_env";
  if (name.front() == '/') return {name};
  std::vector<std::string> files;
  if (home != nullptr && *home != '\0') files.push_back(std::string(home) + "/" + name);
  files.push_back("./" + name);
  return files;
}

bool exported_environment(const std::vector<std::string>& environment,
                          const std::vector<std::string>& env_files,
                          std::map<std::string, std::string>& out, std::string& error) {
  for (const std::string& entry : environment) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos) continue;
    const std::string name = entry.substr(0, equals);
    if (exported_name(name)) out[name] = entry.substr(equals + 1);
  }
  for (const std::string& path : env_files) {
    if (!read_env_file(path, out, error)) return false;
  }
  return true;
}

}  // namespace dslaunch::runner
