#pragma once

// A tiny training job for the engine's tests: a GPT small enough to train 50
// steps in seconds, on token files with structure it can learn.

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "core/checkpoint/shard_file.h"
#include "core/dtype.h"
#include "core/layout/model_config.h"
#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "worker/comm/communicator.h"
#include "worker/data/llmc_token_file.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::engine::testing {

// Whether the CPU backend keeps bf16 products' copy of the weights on this
// machine: where oneDNN multiplies bf16 (AVX512_BF16 or AMX). The plan
// counts the copy whatever the CPU.
inline bool bf16_weight_copy_kept() {
  auto probe = kernels::make_cpu_backend(1);
  probe->set_matmul_precision(core::DType::kBF16);
  return probe->matmul_kernel().rfind("oneDNN", 0) == 0;
}

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
  spec.data.train_on(train);
  if (!valid.empty()) spec.data.valid = {valid};
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

// Writes a checkpoint slice as the shard `root`/step_<S>/rank_<rank>.bin of
// `ranks`, with everything it carries (the loss scaler, the optimizer's own
// state).
inline void write_test_shard(const std::string& root, const CheckpointSlice& slice, int rank,
                             int ranks) {
  const std::filesystem::path folder =
      std::filesystem::path(root) / fmt::format("step_{}", slice.step);
  std::filesystem::create_directories(folder);
  const core::WrittenShard written =
      core::write_shard((folder / fmt::format("rank_{}.bin", rank)).string(),
                        shard_header(slice, rank, ranks), slice.arrays, slice.rank_arrays);
  REQUIRE(written.error == "");
}

// The checkpoint of `step` under `root` (its shards in step_<step>/) as the
// controller hands it to ranks: every shard with the range its header gives,
// the size of the whole model, and the samples consumed (`step` steps of
// `global_batch`).
inline ResumePoint resume_point(const std::string& root, int64_t step, const spec::ModelSpec& model,
                                int64_t global_batch) {
  ResumePoint resume;
  resume.step = step;
  resume.samples_seen = step * global_batch;
  resume.total_parameters = core::ParameterTable(core::model_config(model, 1)).total();
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(root) /
                                                               fmt::format("step_{}", step))) {
    std::string error;
    const auto header = core::read_shard_header(entry.path().string(), error);
    REQUIRE(header);
    resume.shards.push_back({entry.path().string(), header->begin, header->end});
  }
  return resume;
}

// The largest absolute difference between two runs' final parameters (laid
// out as one rank holds the model), apart from and within the attention's
// key biases. Those get a zero gradient in exact arithmetic (softmax ignores
// a shift shared by all keys of a query), so what they receive is rounding
// noise, which Adam normalises into steps of up to the learning rate: any
// change of summation order moves them by far more than the parameters
// that learn anything.
struct ParamDifference {
  double learning = 0;
  double key_bias = 0;
};

inline ParamDifference param_difference(const std::vector<float>& a, const std::vector<float>& b,
                                        const spec::ModelSpec& model) {
  const core::ParameterTable table(core::model_config(model, 1));
  std::vector<bool> key_bias(a.size(), false);
  for (int l = 0; l < model.num_layers; ++l) {
    const int64_t offset = table.tensor(core::TensorRole::kQkvBias, l).offset;
    std::fill(key_bias.begin() + offset + model.hidden_size,
              key_bias.begin() + offset + 2 * model.hidden_size, true);
  }
  ParamDifference worst;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    double& slot = key_bias[i] ? worst.key_bias : worst.learning;
    slot = std::max(slot, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return worst;
}

}  // namespace dslaunch::worker::engine::testing
