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

}  // namespace dslaunch::launcher
