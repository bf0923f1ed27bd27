#include "worker/selftest/training_check.h"

#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>

#include "core/spec/job_spec.h"
#include "worker/data/llmc_token_file.h"
#include "worker/data/training_data.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker::selftest {
namespace {

constexpr int64_t kVocab = 128;

// Tokens a model can learn: runs of an arithmetic sequence mod the
// vocabulary whose stride changes at random points.
std::vector<uint16_t> learnable_tokens(int64_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int> stride_of(1, 7), run_of(8, 40);
  std::vector<uint16_t> tokens;
  int64_t value = 0;
  while (static_cast<int64_t>(tokens.size()) < count) {
    const int stride = stride_of(generator);
    for (int i = run_of(generator); i > 0 && static_cast<int64_t>(tokens.size()) < count; --i) {
      value = (value + stride) % kVocab;
      tokens.push_back(static_cast<uint16_t>(value));
    }
  }
  return tokens;
}

spec::JobSpec small_gpt(const std::string& dir, int steps, bool bf16) {
  spec::JobSpec spec;
  spec.kind = spec::JobKind::kTrain;
  spec.cluster.device = spec::Device::kCpu;  // the trainer runs on the backend it is given
  spec.model.num_layers = 2;
  spec.model.hidden_size = 64;
  spec.model.num_attention_heads = 4;
  spec.model.vocab_size = kVocab;
  spec.model.seq_length = 32;
  spec.model.make_vocab_size_divisible_by = 64;
  spec.model.init_seed = 1234;
  spec.data.train_on(dir + "/train.bin");
  spec.data.valid = {dir + "/valid.bin"};
  spec.data.format = spec::DataFormat::kLlmc;
  spec.training.steps = steps;
  spec.training.batch.micro_batch_per_gpu = 4;
  spec.training.batch.gradient_accumulation_steps = 1;
  spec.training.batch.train_batch_size = 4;
  spec.training.gradient_clipping = 1.0;
  spec.training.optimizer.lr = 3e-3;
  spec.training.optimizer.betas = {0.9, 0.95};
  spec.training.optimizer.weight_decay = 0.1;
  spec.training.eval_interval = steps;
  spec.training.eval_batches = 2;
  spec.training.bf16 = bf16;
  return spec;
}

struct Run {
  std::vector<double> losses;
  std::string error;
};

Run train_on(kernels::Backend& backend, const spec::JobSpec& spec, comm::Communicator& solo) {
  Run run;
  const data::TrainingData data = data::open_training_data(spec.data, spec.model.seq_length, "");
  if (!data.error.empty()) {
    run.error = data.error;
    return run;
  }
  engine::TrainerOptions options;
  options.data_comm = &solo;
  options.on_step = [&run](const engine::StepReport& report) { run.losses.push_back(report.loss); };
  const engine::TrainResult result = engine::train(spec, data, backend, options);
  run.error = result.error;
  return run;
}

}  // namespace

std::vector<TrainingCheck> check_training(kernels::Backend& device, kernels::Backend& reference,
                                          comm::Communicator& solo, int steps,
                                          const std::string& scratch_dir) {
  std::string templ = (std::filesystem::path(scratch_dir) / "dslaunch-selftest-XXXXXX").string();
  const char* made = mkdtemp(templ.data());
  std::vector<TrainingCheck> checks;
  for (const bool bf16 : {false, true}) {
    TrainingCheck check;
    check.precision = bf16 ? "bf16" : "fp32";
    check.steps = steps;
    // fp32 sums in other orders drift apart slowly over the steps; bf16
    // rounds the products' operands, where a last-bit difference can round
    // one of them the other way.
    check.tolerance = bf16 ? 2e-3 : 1e-4;
    check.error = std::numeric_limits<double>::infinity();
    checks.push_back(check);
  }
  if (made == nullptr) {
    for (TrainingCheck& check : checks) {
      check.error_message = "cannot create a directory under " + scratch_dir;
    }
    return checks;
  }
  const std::string dir = made;
  std::string error;
  if (!data::write_llmc_token_file(dir + "/train.bin", learnable_tokens(40000, 1), error) ||
      !data::write_llmc_token_file(dir + "/valid.bin", learnable_tokens(4000, 2), error)) {
    for (TrainingCheck& check : checks) check.error_message = error;
    std::filesystem::remove_all(dir);
    return checks;
  }
  for (TrainingCheck& check : checks) {
    const spec::JobSpec spec = small_gpt(dir, steps, check.precision == "bf16");
    const Run expected = train_on(reference, spec, solo);
    const Run actual = train_on(device, spec, solo);
    if (!expected.error.empty() || !actual.error.empty()) {
      check.error_message = !actual.error.empty() ? "on the device: " + actual.error
                                                  : "on the CPU: " + expected.error;
      continue;
    }
    if (actual.losses.size() != expected.losses.size() || actual.losses.empty()) {
      check.error_message = "the runs took different numbers of steps";
      continue;
    }
    check.error = 0;
    for (size_t i = 0; i < actual.losses.size(); ++i) {
      const double e = std::abs(actual.losses[i] - expected.losses[i]) / expected.losses[i];
      check.error =
          std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(check.error, e);
    }
    check.device_final_loss = actual.losses.back();
    check.reference_final_loss = expected.losses.back();
  }
  std::filesystem::remove_all(dir);
  return checks;
}

}  // namespace dslaunch::worker::selftest
