#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dslaunch::worker {

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

// `dsworker eval`, which `dslaunch eval` runs: the mean cross-entropy of the
// weights over the first N consecutive (batch, seq) windows of the token
// file, targets shifted by one token; with --json, `{"loss": ...,
// "batches": N, "tokens": ...}`.
int run_eval_command(const EvalOptions& options);

}  // namespace dslaunch::worker
