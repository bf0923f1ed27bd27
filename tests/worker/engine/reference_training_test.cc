// Training dynamics against an independent implementation: the engine's
// model (forward and backward), global-norm clipping and AdamW take eight
// steps from the same initial weights on the same batches as PyTorch's
// autograd, clip_grad_norm_ and torch.optim.AdamW (tools/reference), and
// every step's loss and gradient norm must agree.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "core/spec/job_spec.h"
#include "tests/support/run_command.h"
#include "worker/data/consecutive_batch.h"
#include "worker/data/llmc_token_file.h"
#include "worker/engine/optimizer.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "worker/model/gpt2_model.h"
#include "core/weights/hf_gpt2.h"

namespace fs = std::filesystem;
namespace data = dslaunch::worker::data;
namespace engine = dslaunch::worker::engine;
namespace model = dslaunch::worker::model;
namespace core = dslaunch::core;
namespace spec = dslaunch::spec;
namespace testing = dslaunch::testing;
namespace kernels = dslaunch::kernels;

namespace {

constexpr int64_t kBatch = 4;
constexpr int64_t kSeq = 32;
constexpr int64_t kSteps = 8;
constexpr int64_t kVocab = 96;
constexpr double kLr = 2e-3;
constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.95;
constexpr double kEps = 1e-8;
constexpr double kWeightDecay = 0.1;

fs::path temp_folder() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp != nullptr ? tmp : fs::temp_directory_path().string()) /
                       ("reference_training_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// 2 blocks of 64 channels and 2 heads; 96 real tokens in 128 embedding rows,
// so the padded rows (which PyTorch's model does not have) are exercised.
core::Gpt2Config tiny_config() {
  core::Gpt2Config config;
  config.num_layers = 2;
  config.channels = 64;
  config.num_heads = 2;
  config.vocab_size = kVocab;
  config.padded_vocab_size = core::padded_vocab(kVocab, 128);
  config.max_seq_len = kSeq;
  return config;
}

// Text a model can learn something from in a few steps: each token follows
// from the one before by a fixed map plus a small random step.
std::vector<uint16_t> structured_tokens(int64_t count) {
  std::mt19937 engine(5);
  std::vector<uint16_t> tokens = {1};
  while (static_cast<int64_t>(tokens.size()) < count) {
    const uint32_t next = (tokens.back() * 5u + 7u + engine() % 3u) % kVocab;
    tokens.push_back(static_cast<uint16_t>(next));
  }
  return tokens;
}

struct StepValues {
  std::vector<double> losses;
  std::vector<double> grad_norms;
};

// The engine's steps, as worker/engine/trainer.cc takes them with one rank
// and one micro-batch: zeroed gradients, forward and backward of batch s,
// the global norm, clipping by max/(norm + 1e-6) when below 1, AdamW.
StepValues train_with_engine(const core::ParameterTable& table, std::vector<float> params,
                             const data::TokenSource& tokens, const spec::OptimizerSpec& optimizer,
                             double clip) {
  auto backend = kernels::make_cpu_backend(1);
  model::Gpt2Model gpt2(table, *backend, kBatch, kSeq);
  engine::AdamW adamw(optimizer, table, 0, table.total());
  std::vector<float> grads(static_cast<size_t>(table.total()));
  std::vector<int32_t> inputs(kBatch * kSeq), targets(kBatch * kSeq);
  StepValues values;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    data::consecutive_batch(data::whole(tokens), step, kBatch, kSeq, inputs.data(), targets.data());
    values.losses.push_back(gpt2.forward(params.data(), inputs.data(), targets.data(), kBatch));
    gpt2.backward(params.data(), grads.data(), 1.0f, {});
    const double norm = std::sqrt(backend->sum_of_squares(grads.data(), table.total()));
    values.grad_norms.push_back(norm);
    const double factor = clip / (norm + 1e-6);
    if (clip > 0 && factor < 1) {
      backend->scale(grads.data(), table.total(), static_cast<float>(factor));
    }
    REQUIRE(adamw.step(*backend, params.data(), grads.data(), kLr).ok());
  }
  return values;
}

// The JSON object the reference prints last (Python may warn before it).
nlohmann::json last_json_line(const std::string& output) {
  std::istringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (line.starts_with("{")) last = line;
  }
  return nlohmann::json::parse(last);
}

double worst_relative_difference(const std::vector<double>& ours,
                                 const std::vector<double>& theirs) {
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    worst = std::max(worst, std::abs(ours[i] - theirs[i]) / std::abs(theirs[i]));
  }
  return worst;
}

}  // namespace

TEST_CASE("eight training steps match PyTorch's autograd, clip_grad_norm_ and AdamW") {
  const core::ParameterTable table(tiny_config());
  std::vector<float> params(static_cast<size_t>(table.total()));
  model::init_gpt2_parameters(table, 17, params.data());

  const fs::path dir = temp_folder();
  const std::string weights = (dir / "init.safetensors").string();
  const std::string token_path = (dir / "tokens.bin").string();
  std::string error;
  REQUIRE(core::write_hf_gpt2(weights, table, params.data(), error));
  REQUIRE(data::write_llmc_token_file(token_path, structured_tokens(kSteps * kBatch * kSeq + 1),
                                      error));
  const data::TokenSourceResult tokens = data::open_llmc_token_file(token_path);
  REQUIRE(tokens.error.empty());

  spec::OptimizerSpec optimizer;
  optimizer.lr = kLr;
  optimizer.betas = {kBeta1, kBeta2};
  optimizer.eps = kEps;
  optimizer.weight_decay = kWeightDecay;
  // Without clipping, and with a bound amid this run's norms (1.4 to 1.75),
  // so that clipped and unclipped steps are both compared.
  const double clip = GENERATE(0.0, 1.5);
  INFO("clip " << clip);

  const StepValues ours = train_with_engine(table, params, *tokens.source, optimizer, clip);
  const auto reference = testing::run_command(fmt::format(
      "/usr/bin/python3 {} train-steps --weights {} --tokens {} --n-head 2 --batch {} --seq {} "
      "--steps {} --lr {} --betas {} {} --eps {} --weight-decay {} --clip {} --threads 1",
      testing::runfile("tools/reference/gpt2_reference.py"), weights, token_path, kBatch, kSeq,
      kSteps, kLr, kBeta1, kBeta2, kEps, kWeightDecay, clip));
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  const nlohmann::json torch = last_json_line(reference.output);
  const auto torch_losses = torch["losses"].get<std::vector<double>>();
  const auto torch_norms = torch["grad_norms"].get<std::vector<double>>();
  REQUIRE(torch_losses.size() == kSteps);
  REQUIRE(torch_norms.size() == kSteps);

  // The two agree to about 2e-7 here. Looser bounds would miss real
  // mistakes: leaving the embeddings out of weight decay, or decaying biases
  // and LayerNorm parameters too, moves the losses by 9e-5 and 6e-5 over
  // these steps; an eps of 1e-6 instead of 1e-8 by 3e-5.
  for (int64_t step = 0; step < kSteps; ++step) {
    INFO("step " << step + 1);
    CHECK(ours.losses[step] == Approx(torch_losses[step]).epsilon(1e-5));
    CHECK(ours.grad_norms[step] == Approx(torch_norms[step]).epsilon(1e-4));
  }
  // The steps did train: the comparison is of a moving model.
  CHECK(ours.losses.back() < ours.losses.front() - 0.1);
  if (clip > 0) {
    CHECK(std::any_of(ours.grad_norms.begin(), ours.grad_norms.end(),
                      [&](double norm) { return norm > clip; }));
    CHECK(std::any_of(ours.grad_norms.begin(), ours.grad_norms.end(),
                      [&](double norm) { return norm < clip; }));
  }
  std::printf("clip %g: worst relative difference to PyTorch: loss %.3g, grad norm %.3g\n", clip,
              worst_relative_difference(ours.losses, torch_losses),
              worst_relative_difference(ours.grad_norms, torch_norms));
}
