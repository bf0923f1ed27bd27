#pragma once

#include <map>
#include <string>
#include <vector>

namespace dslaunch::runner {

// The launcher's own variables that reach every rank, as DeepSpeed's runner
// forwards them to other hosts (Open MPI passes a remote rank nothing it is
// not told to): those whose names start with one of kExportedPrefixes, then
// the lines of the `.deepspeed_env` files (NAME=VALUE), which override them.
//
// DeepSpeed's prefixes are MLFLOW, NCCL, PYTHON, MV2 and UCX; this engine
// adds the thread and math-library settings a CPU rank reads (OMP_, KMP_,
// OPENBLAS_, ONEDNN_, DNNL_) and CUDA's allocator and launch settings
// (CUDA_ but CUDA_VISIBLE_DEVICES: the launch host's selection says nothing
// about another host's GPUs, and each rank opens the GPU of its placement,
// cuda:<index>, by that index), and
// DSLAUNCH_LOG_LEVEL, so the ranks log at the controller's level.
extern const std::vector<std::string> kExportedPrefixes;

// Where DeepSpeed looks for its environment file, in order (a later file
// overrides an earlier one): `$HOME/NAME` and `./NAME`, NAME being
// $DS_ENV_FILE or ".deepspeed_env" (an absolute DS_ENV_FILE is that file).
std::vector<std::string> deepspeed_env_files(const char* home, const char* ds_env_file);

// `environment` holds "NAME=VALUE" entries (as environ does). Files that do
// not exist are skipped. In a file, blank lines and lines starting with '#'
// are skipped; any other line must be NAME=VALUE with a valid variable name,
// else `error` names the file and line and false is returned.
bool exported_environment(const std::vector<std::string>& environment,
                          const std::vector<std::string>& env_files,
                          std::map<std::string, std::string>& out, std::string& error);

}  // namespace dslaunch::runner
