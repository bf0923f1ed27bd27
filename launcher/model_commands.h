#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dslaunch::launcher {

// `dslaunch export JOB_DIR_OR_WEIGHTS --out F.safetensors`: writes the
// model's fp32 weights under Hugging Face GPT-2 names, with a config.json
// beside F. The source is a job (id, prefix or directory: the weights its
// training wrote) or a GPT-2 safetensors file. Returns 0, 1 (the source
// could not be read or the output written), 2 (bad input).
int run_export_command(const std::string& source, const std::string& out);

// `dslaunch eval ARGS...`: runs `dsworker eval ARGS...` in place of this
// process (the model runs in the worker) and returns only if it cannot be
// started, with 1.
int run_eval_command(int argc, char** argv);

// `dslaunch selftest ARGS...`: runs `dsworker selftest ARGS...` in place of
// this process, as eval does.
int run_selftest_command(int argc, char** argv);

// `dslaunch generate ARGS...`: runs `dsworker generate ARGS...` in place of
// this process, as eval does, after turning a --weights that names a job
// (an id or a unique prefix of one) rather than a file or folder into that
// job's directory, whose weights/model.safetensors the worker reads. Returns
// only if it cannot, with 2 (no such job) or 1 (the worker cannot start).
int run_generate_command(int argc, char** argv);

}  // namespace dslaunch::launcher
