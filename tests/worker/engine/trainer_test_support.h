#pragma once

// A tiny training job for the engine's tests: a GPT small enough to train 50
// steps in seconds, on token files with structure it can learn.

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/spec/job_spec.h"
#include "worker/comm/communicator.h"
#include "worker/data/llmc_token_file.h"

namespace dslaunch::worker::engine::testing {

inline spec::JobSpec tiny_job(const std::string& train, const std::string& valid) {
  spec::JobSpec spec;
  spec.kind = spec::JobKind::kTrain;
  spec.cluster.device = spec::Device::kCpu;
  spec.model.num_layers = 2;
  spec.model.hidden_size = 32;
  spec.model.num_attention_heads = 2;
  spec.model.vocab_size = 64;
  spec.model.seq_length = 16;
  spec.model.make_vocab_size_divisible_by = 8;
  spec.model.init_seed = 99;
  spec.data.train = train;
  spec.data.valid = valid;
  spec.data.format = spec::DataFormat::kLlmc;
  spec.training.steps = 50;
  spec.training.gradient_clipping = 1.0;
  spec.training.optimizer.lr = 3e-3;
  spec.training.optimizer.betas = {0.9, 0.95};
  spec.training.optimizer.weight_decay = 0.1;
  spec.training.scheduler.type = spec::SchedulerType::kWarmupCosineLR;
  spec.training.scheduler.warmup_num_steps = 5;
  spec.training.scheduler.total_num_steps = 50;
  spec.training.eval_interval = 10;
  spec.training.eval_batches = 2;
  spec.training.zero.reduce_bucket_size = 5000;  // several buckets for this model
  return spec;
}

// Tokens with learnable structure: runs of an arithmetic sequence mod 64
// whose stride changes at random points.
inline std::vector<uint16_t> structured_tokens(int64_t count, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<uint16_t> tokens;
  uint16_t value = 0;
  uint16_t stride = 1;
  for (int64_t i = 0; i < count; ++i) {
    if (engine() % 24 == 0) stride = static_cast<uint16_t>(1 + engine() % 7);
    value = static_cast<uint16_t>((value + stride) % 64);
    tokens.push_back(value);
  }
  return tokens;
}

// Rank 0 of `comm` writes train.bin and valid.bin into a fresh directory and
// every rank of `comm` learns its path ("" if the broadcast failed).
inline std::string shared_token_files(comm::Communicator& comm) {
  std::vector<uint8_t> dir(4096, 0);
  if (comm.rank() == 0) {
    std::string templ =
        (std::filesystem::temp_directory_path() / "dslaunch-trainer-XXXXXX").string();
    const char* made = mkdtemp(templ.data());
    const std::string path = made == nullptr ? "" : made;
    std::string error;
    data::write_llmc_token_file(path + "/train.bin", structured_tokens(20000, 1), error);
    data::write_llmc_token_file(path + "/valid.bin", structured_tokens(4000, 2), error);
    std::copy(path.begin(), path.end(), dir.begin());
  }
  const core::Status sent =
      comm.broadcast(comm::buffer_of(dir.data(), static_cast<int64_t>(dir.size())), 0)->wait();
  if (!sent.ok()) return "";
  return reinterpret_cast<const char*>(dir.data());
}

}  // namespace dslaunch::worker::engine::testing
