#include "worker/eval_command.h"

#include <algorithm>
#include <exception>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/weights/hf_gpt2.h"
#include "kernels/backend.h"
#include "worker/data/consecutive_batch.h"
#include "worker/data/open_token_source.h"
#include "worker/data/token_source.h"
#include "worker/engine/evaluation.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker {
namespace {

constexpr int kFailed = 1;
constexpr int kBadInput = 2;

int evaluate(const EvalOptions& options) {
  if (options.batch < 1 || options.seq < 1) {
    std::cerr << "dslaunch eval: --batch and --seq must be at least 1\n";
    return kBadInput;
  }
  const core::HfGpt2Weights loaded =
      core::load_hf_gpt2(options.weights, options.num_heads, 1);
  if (!loaded.error.empty()) {
    std::cerr << "dslaunch eval: " << loaded.error << "\n";
    return kBadInput;
  }
  if (options.seq > loaded.config.max_seq_len) {
    std::cerr << fmt::format("dslaunch eval: --seq {} is longer than the model's {} positions\n",
                             options.seq, loaded.config.max_seq_len);
    return kBadInput;
  }
  data::TokenSourceResult tokens =
      data::open_token_source(options.tokens, spec::DataFormat::kAuto);
  if (!tokens.source) {
    std::cerr << "dslaunch eval: " << tokens.error << "\n";
    return kBadInput;
  }
  if (tokens.source->max_token() >= loaded.config.vocab_size) {
    std::cerr << fmt::format(
        "dslaunch eval: {} holds token {}, outside the model's vocabulary "
        "of {}\n",
        options.tokens, tokens.source->max_token(), loaded.config.vocab_size);
    return kBadInput;
  }
  const data::TokenRange range = data::whole(*tokens.source);
  const int64_t fit =
      data::consecutive_batch_count(range.size(), options.batch, options.seq);
  const int64_t batches = options.batches.value_or(fit);
  if (batches < 1 || batches > fit) {
    std::cerr << fmt::format(
        "dslaunch eval: {} holds {} tokens: {} whole batches of {} x {} "
        "(plus one target), not {}\n",
        options.tokens, range.size(), fit, options.batch, options.seq, batches);
    return kBadInput;
  }
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::unique_ptr<kernels::Backend> backend = kernels::make_cpu_backend(threads);
  core::Gpt2Config config = loaded.config;
  const core::ParameterTable table(config);
  model::Gpt2Model model(table, *backend, options.batch, options.seq);
  const double loss = engine::sum_of_batch_losses({&model}, loaded.params.data(), range,
                                                          options.batch, batches, 0, 1) /
                      static_cast<double>(batches);
  if (options.json) {
    std::cout << nlohmann::json{{"loss", loss},
                                {"batches", batches},
                                {"tokens", batches * options.batch * options.seq}}
                     .dump()
              << "\n";
  } else {
    std::cout << fmt::format("loss {:.6f} over {} batches of {} x {} tokens\n", loss, batches,
                             options.batch, options.seq);
  }
  return 0;
}

}  // namespace

int run_eval_command(const EvalOptions& options) {
  try {
    return evaluate(options);
  } catch (const std::exception& error) {
    std::cerr << "dslaunch eval: " << error.what() << "\n";
    return kFailed;
  }
}

}  // namespace dslaunch::worker
