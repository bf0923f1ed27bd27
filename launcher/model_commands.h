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

struct EvalOptions {
  std::string weights;    // GPT-2 safetensors, ours or another tool's
  std::string tokens;     // llm.c token file or Megatron dataset prefix
  int64_t num_heads = 0;  // 0: from a config.json beside the weights
  int64_t batch = 0;
  int64_t seq = 0;
  std::optional<int64_t> batches;  // default: every whole batch in the file
  bool json = false;
  int threads = 0;  // 0: every core
};

// `dslaunch eval`: the mean cross-entropy of the weights over the first N
// consecutive (batch, seq) windows of the token file, targets shifted by one
// token; with --json, `{"loss": ..., "batches": N, "tokens": ...}`.
int run_eval_command(const EvalOptions& options);

}  // namespace dslaunch::launcher
