#pragma once

// A one-rank GPT-2 124M job's steps through engine::train on a GPU, on
// random tokens held in memory: what the GPU benchmarks time the engine by.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/spec/job_spec.h"
#include "kernels/backend.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/data/tokens_in_memory.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::bench {

struct Shape {
  int64_t batch = 8;
  int64_t seq = 1024;
};

struct Throughput {
  double tokens_per_second = 0;
  double tflops = 0;
  double step_ms = 0;
  float last_loss = 0;
};

// How the job trains: bf16 or fp32, at ZeRO `stage`, with offload_optimizer
// `offload` (cpu: `ratio` of the states in host memory, stepped by CPU Adam
// on every core; at 1, every state there and the GPU mirroring the
// parameters and gradients) and its pin_memory.
struct EngineJob {
  Shape shape;
  bool bf16 = true;
  int stage = 0;
  spec::OffloadDevice offload = spec::OffloadDevice::kNone;
  double ratio = 1;
  bool pin_memory = false;
  int warmup = 3;
  int steps = 10;
};

// The median step of `job` on `backend` (the sampler, the loss and the norm
// back to the host, clipping, the loss scaler's check included), in a data
// group of this process alone: MPI started as a singleton, once, by the
// caller (`mpi`: how that went; MPI cannot start again after it ends).
// nullopt and `error` set where it did not run; where it did, `error`
// holds the trainer's notices (pin_memory's refusal among them), if any.
inline std::optional<Throughput> run_engine_job(kernels::Backend& backend, const EngineJob& job,
                                                const core::Status& mpi, std::string& error) {
  if (!mpi.ok()) {
    error = "the engine did not run: MPI did not start: " + mpi.message();
    return std::nullopt;
  }
  auto groups = worker::comm::create_mpi_process_groups({1, 1, 1}, worker::comm::CommOptions{});
  if (!groups.ok()) {
    error = "the engine did not run: " + groups.status().message();
    return std::nullopt;
  }
  const Shape& shape = job.shape;
  spec::JobSpec spec;
  spec.kind = spec::JobKind::kTrain;
  spec.cluster.device = spec::Device::kCuda;
  spec.model.num_layers = 12;
  spec.model.hidden_size = 768;
  spec.model.num_attention_heads = 12;
  spec.model.vocab_size = 50257;
  spec.model.seq_length = shape.seq;
  spec.training.steps = job.warmup + job.steps;
  spec.training.batch.train_batch_size = shape.batch;
  spec.training.batch.micro_batch_per_gpu = shape.batch;
  spec.training.batch.gradient_accumulation_steps = 1;
  spec.training.optimizer.lr = 1e-4;
  spec.training.optimizer.weight_decay = 0.1;
  spec.training.gradient_clipping = 1.0;
  spec.training.eval_interval = 0;
  spec.training.eval_batches = 1;
  spec.training.bf16 = job.bf16;
  spec.training.zero.stage = job.stage;
  spec.training.zero.offload_optimizer.device = job.offload;
  spec.training.zero.offload_optimizer.ratio = job.ratio;
  spec.training.zero.offload_optimizer.pin_memory = job.pin_memory;
  worker::data::TrainingData data;
  std::mt19937 random(7);
  std::vector<int32_t> tokens((job.warmup + job.steps + 2) * shape.batch * (shape.seq + 1));
  for (auto& token : tokens) token = static_cast<int32_t>(random() % spec.model.vocab_size);
  data.sources.push_back(std::make_unique<worker::data::TokensInMemory>(std::move(tokens)));
  const worker::data::TokenSource& source = *data.sources.back();
  const int64_t valid = 2 * shape.batch * (shape.seq + 1);
  data.train = {{&source, 0, source.size() - valid}};
  data.weights = {1.0};
  data.valid = {&source, source.size() - valid, source.size()};
  auto host = kernels::make_cpu_backend(
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::vector<worker::engine::StepReport> reports;
  worker::engine::TrainerOptions options;
  options.data_comm = &(*groups)->data();
  options.host_backend = host.get();
  options.on_step = [&](const worker::engine::StepReport& report) {
    if (report.step > job.warmup) reports.push_back(report);
  };
  options.on_notice = [&error](const std::string& notice) { error += "notice: " + notice; };
  const worker::engine::TrainResult result = worker::engine::train(spec, data, backend, options);
  if (!result.error.empty() || reports.empty()) {
    error = "the engine did not run: " + result.error;
    return std::nullopt;
  }
  std::sort(reports.begin(), reports.end(),
            [](const auto& a, const auto& b) { return a.step_seconds < b.step_seconds; });
  const worker::engine::StepReport& median = reports[reports.size() / 2];
  return Throughput{median.tokens_per_second, median.tflops, median.step_seconds * 1e3,
                    static_cast<float>(median.loss)};
}

}  // namespace dslaunch::bench
