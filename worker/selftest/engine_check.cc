#include "worker/selftest/engine_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/spec/job_spec.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/data/tokens_in_memory.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"
#include "worker/selftest/learnable_tokens.h"

namespace dslaunch::worker::selftest {
namespace {

constexpr int kVocab = 128;

data::TrainingData selftest_data() {
  data::TrainingData data;
  // Held in memory: the selftest needs no files.
  data.sources.push_back(
      std::make_unique<data::TokensInMemory>(learnable_tokens(40000, kVocab, 1)));
  const data::TokenSource& source = *data.sources.back();
  const int64_t split = source.size() * 9 / 10;
  data.train = {{&source, 0, split}};
  data.weights = {1.0};
  data.valid = {&source, split, source.size()};
  return data;
}

// Where the device's run keeps its optimizer, at which ZeRO stage.
struct Placement {
  spec::OffloadDevice offload = spec::OffloadDevice::kNone;
  int stage = 2;
  const char* name = "";
};

// Each data rank takes 2 micro-batches of 2 sequences a step.
spec::JobSpec selftest_job(bool bf16, Placement placement, int steps, int data_ranks) {
  spec::JobSpec spec;
  spec.kind = spec::JobKind::kTrain;
  spec.cluster.device = spec::Device::kCuda;
  spec.model.num_layers = 2;
  spec.model.hidden_size = 64;
  spec.model.num_attention_heads = 4;
  spec.model.vocab_size = kVocab;
  spec.model.seq_length = 32;
  spec.training.steps = steps;
  spec.training.batch.train_batch_size = 4 * data_ranks;
  spec.training.batch.micro_batch_per_gpu = 2;
  spec.training.batch.gradient_accumulation_steps = 2;
  spec.training.gradient_clipping = 1.0;
  spec.training.optimizer.lr = 3e-3;
  spec.training.optimizer.betas = {0.9, 0.95};
  spec.training.optimizer.weight_decay = 0.1;
  // Adam takes a step of about lr on a gradient of any size above eps: one
  // that bf16 roundings leave at noise level would move by lr either way.
  spec.training.optimizer.eps = 1e-6;
  spec.training.eval_interval = 0;
  spec.training.eval_batches = 4;
  spec.training.bf16 = bf16;
  spec.training.zero.stage = placement.stage;
  spec.training.zero.reduce_bucket_size = 20000;  // several buckets for this model
  // Stage 3 gathers each block's weights (over 4,000 floats) around their
  // use and keeps the smaller tensors whole.
  spec.training.zero.param_persistence_threshold = 1000;
  spec.training.zero.offload_optimizer.device = placement.offload;
  // As DeepSpeed's ZeRO-Offload configs have it: the copies go through
  // page-locked host memory.
  spec.training.zero.offload_optimizer.pin_memory = placement.offload != spec::OffloadDevice::kNone;
  return spec;
}

struct Losses {
  std::vector<double> steps;
  double eval = 0;
  std::vector<float> masters;  // the fp32 parameters the optimizer holds after the last step
  std::string error;
};

Losses train_on(kernels::Backend& backend, kernels::Backend* host, const spec::JobSpec& spec,
                const data::TrainingData& data, comm::Communicator& data_comm, bool nccl = false) {
  Losses losses;
  engine::TrainerOptions options;
  options.data_comm = &data_comm;
  options.host_backend = host;
  if (nccl) {
    options.device_communicator = [](comm::Communicator& host_comm) {
      return comm::make_nccl_communicator(host_comm);
    };
  }
  options.on_step = [&losses](const engine::StepReport& report) {
    losses.steps.push_back(report.loss);
    if (report.eval_loss) losses.eval = *report.eval_loss;
  };
  // Its checkpoint after the last step holds them (masters in 16-bit
  // training, which its weights are roundings of), in memory or read from
  // where they live (the device's memory) through the slice's reader.
  options.save_checkpoint = [&losses](const engine::CheckpointSlice& slice) {
    const core::ShardArrayData& parameters = slice.arrays.front();
    losses.masters.assign(slice.end - slice.begin, std::numeric_limits<float>::quiet_NaN());
    if (parameters.data != nullptr) {
      const auto* masters = static_cast<const float*>(parameters.data);
      std::copy(masters, masters + losses.masters.size(), losses.masters.begin());
    } else if (std::string error = parameters.read(0, static_cast<int64_t>(losses.masters.size()),
                                                   losses.masters.data());
               !error.empty()) {
      losses.error = "reading the final parameters: " + error;
    }
  };
  if (std::string error = engine::train(spec, data, backend, options).error; !error.empty()) {
    losses.error = error;
  }
  return losses;
}

double relative_error(double actual, double expected) {
  const double e = std::abs(actual - expected) / std::abs(expected);
  return std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
}

// The largest difference of this rank's part of the final parameters, and
// the largest reference value there.
struct ParameterDifference {
  double difference = 0;
  double largest = 0;
};

ParameterDifference compare(const Losses& actual, const Losses& expected, EngineCheck& check) {
  for (size_t i = 0; i < actual.steps.size(); ++i) {
    check.error = std::max(check.error, relative_error(actual.steps[i], expected.steps[i]));
  }
  check.error = std::max(check.error, relative_error(actual.eval, expected.eval));
  double largest = 0, difference = 0;
  for (size_t i = 0; i < expected.masters.size(); ++i) {
    largest = std::max(largest, std::abs(double{expected.masters[i]}));
    // std::max would pass a NaN over: a weight never read back is one.
    const double d = std::abs(double{actual.masters[i]} - expected.masters[i]);
    difference = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(difference, d);
    if (std::isinf(difference)) break;
  }
  check.parameter_error = difference / largest;
  check.device_eval_loss = actual.eval;
  check.reference_eval_loss = expected.eval;
  return {difference, largest};
}

// Each rank compared its own part of the parameters (its checkpoint
// partition): every rank takes the group's worst, relative to the whole
// model's largest parameter, and a failure anywhere.
void agree(comm::Communicator& data_comm, const ParameterDifference& mine, EngineCheck& check) {
  if (data_comm.size() == 1) return;
  double worst[4] = {check.error, mine.difference, mine.largest, check.failure.empty() ? 0.0 : 1.0};
  const core::Status agreed =
      data_comm.all_reduce(comm::buffer_of(worst, 4), comm::ReduceOp::kMax)->wait();
  if (!agreed.ok()) {
    check.failure = "comparing over the data ranks: " + agreed.message();
    return;
  }
  check.error = worst[0];
  check.parameter_error = worst[1] / worst[2];
  if (worst[3] > 0 && check.failure.empty()) {
    check.failure = "another data rank's run failed (its output says why)";
  }
}

}  // namespace

std::vector<EngineCheck> check_engine(kernels::Backend& device, kernels::Backend& cpu,
                                      comm::Communicator& data_comm, int steps, bool nccl) {
  const data::TrainingData data = selftest_data();
  const int ranks = data_comm.size();
  std::vector<EngineCheck> checks;
  for (const bool bf16 : {false, true}) {
    // The CPU engine's run (ZeRO 2) is the reference for every placement of
    // the device's optimizer: ZeRO 3 gathers the same weights.
    const Losses expected =
        train_on(cpu, nullptr, selftest_job(bf16, {}, steps, ranks), data, data_comm);
    for (const Placement& placement :
         {Placement{spec::OffloadDevice::kNone, 2, "GPU Adam"},
          Placement{spec::OffloadDevice::kCpu, 2, "ZeRO-Offload"},
          Placement{spec::OffloadDevice::kNone, 3, "GPU Adam, ZeRO 3"}}) {
      EngineCheck check;
      check.precision = bf16 ? "bf16" : "fp32";
      check.optimizer = placement.name;
      check.steps = steps;
      // As check_training's: sums in other orders drift apart slowly.
      check.tolerance = bf16 ? 2e-3 : 1e-4;
      // The largest difference of any weight, not the typical drift: where
      // the two runs' bf16 roundings give a small gradient opposite signs,
      // Adam moves that weight by about lr (3e-3) either way. Two data ranks
      // on the emulator part by 3.1e-3 of the largest weight over 20 steps,
      // in some ten weights of 110k (one rank by 5.3e-4).
      check.parameter_tolerance = bf16 ? 8e-3 : 2e-4;
      const Losses actual = train_on(device, &cpu, selftest_job(bf16, placement, steps, ranks),
                                     data, data_comm, nccl);
      if (!expected.error.empty()) check.failure = "the CPU engine: " + expected.error;
      if (!actual.error.empty()) check.failure = "the device: " + actual.error;
      ParameterDifference mine;
      if (check.failure.empty()) mine = compare(actual, expected, check);
      agree(data_comm, mine, check);
      checks.push_back(check);
    }
  }
  return checks;
}

}  // namespace dslaunch::worker::selftest
