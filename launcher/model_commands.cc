#include "launcher/model_commands.h"

#include <exception>
#include <filesystem>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/backend.h"
#include "launcher/checkpoint_export.h"
#include "launcher/job_commands.h"
#include "worker/data/consecutive_batch.h"
#include "worker/data/open_token_source.h"
#include "worker/data/token_source.h"
#include "worker/engine/evaluation.h"
#include "worker/model/gpt2_model.h"
#include "worker/model/hf_gpt2.h"

namespace dslaunch::launcher {
namespace {

namespace fs = std::filesystem;

constexpr int kFailed = 1;
constexpr int kBadInput = 2;

// What an export reads: a safetensors file, or a checkpoint folder.
struct ExportSource {
  std::string weights;
  std::string checkpoint;
};

// A safetensors file as it is; a checkpoint folder, or the newest valid one
// of a folder of checkpoints; a job's final weights, or when it has none
// (killed, or still running) its newest valid checkpoint.
std::optional<ExportSource> export_source_of(const std::string& source, std::string& error) {
  if (fs::is_regular_file(source)) return ExportSource{source, ""};
  const bool checkpoints_here =
      fs::is_regular_file(fs::path(source) / "manifest.json") ||
      fs::is_regular_file(fs::path(source) / "latest");
  if (fs::is_directory(source) && checkpoints_here) {
    const std::string folder = checkpoint_folder_of(source, error);
    if (folder.empty()) return std::nullopt;
    return ExportSource{"", folder};
  }
  const auto job = find_job(source, error);
  if (!job) return std::nullopt;
  const fs::path weights = fs::path(job->path()) / "weights" / "model.safetensors";
  if (fs::is_regular_file(weights)) return ExportSource{weights.string(), ""};
  const std::string folder =
      checkpoint_folder_of((fs::path(job->path()) / "checkpoints").string(), error);
  if (folder.empty()) {
    error = fmt::format("job {} has no final weights ({} is missing) and no checkpoint: {}",
                        job->path(), weights.string(), error);
    return std::nullopt;
  }
  return ExportSource{"", folder};
}

int evaluate(const EvalOptions& options) {
  if (options.batch < 1 || options.seq < 1) {
    std::cerr << "dslaunch eval: --batch and --seq must be at least 1\n";
    return kBadInput;
  }
  const worker::model::HfGpt2Weights loaded =
      worker::model::load_hf_gpt2(options.weights, options.num_heads, 1);
  if (!loaded.error.empty()) {
    std::cerr << "dslaunch eval: " << loaded.error << "\n";
    return kBadInput;
  }
  if (options.seq > loaded.config.max_seq_len) {
    std::cerr << fmt::format("dslaunch eval: --seq {} is longer than the model's {} positions\n",
                             options.seq, loaded.config.max_seq_len);
    return kBadInput;
  }
  worker::data::TokenSourceResult tokens =
      worker::data::open_token_source(options.tokens, spec::DataFormat::kAuto);
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
  const worker::data::TokenRange range = worker::data::whole(*tokens.source);
  const int64_t fit =
      worker::data::consecutive_batch_count(range.size(), options.batch, options.seq);
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
  worker::model::Gpt2Config config = loaded.config;
  const worker::model::ParameterTable table(config);
  worker::model::Gpt2Model model(table, *backend, options.batch, options.seq);
  const double loss = worker::engine::sum_of_batch_losses(model, loaded.params.data(), range,
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

int run_export_command(const std::string& source, const std::string& out) {
  std::string error;
  const std::optional<ExportSource> from = export_source_of(source, error);
  if (!from) {
    std::cerr << "dslaunch export: " << error << "\n";
    return kBadInput;
  }
  worker::model::Gpt2Config config;
  std::vector<float> params;
  if (!from->checkpoint.empty()) {
    ConsolidatedCheckpoint consolidated = consolidate_checkpoint(from->checkpoint);
    if (!consolidated.error.empty()) {
      std::cerr << "dslaunch export: " << consolidated.error << "\n";
      return kFailed;
    }
    std::cout << fmt::format("checkpoint of step {}: {}\n", consolidated.step, from->checkpoint);
    config = consolidated.config;
    params = std::move(consolidated.params);
  } else {
    worker::model::HfGpt2Weights loaded = worker::model::load_hf_gpt2(from->weights, 0, 1);
    if (!loaded.error.empty()) {
      std::cerr << "dslaunch export: " << loaded.error << "\n";
      return kFailed;
    }
    config = loaded.config;
    params = std::move(loaded.params);
  }
  const worker::model::ParameterTable table(config);
  std::error_code ignored;  // a folder that cannot be made fails the write below, with its name
  fs::create_directories(fs::absolute(out).parent_path(), ignored);
  if (!worker::model::write_hf_gpt2(out, table, params.data(), error)) {
    std::cerr << "dslaunch export: " << error << "\n";
    return kFailed;
  }
  std::cout << fmt::format(
      "{}: {} layers, {} channels, {} heads, vocabulary {}; config.json "
      "beside it\n",
      out, config.num_layers, config.channels, config.num_heads, config.vocab_size);
  return 0;
}

int run_eval_command(const EvalOptions& options) {
  try {
    return evaluate(options);
  } catch (const std::exception& error) {
    std::cerr << "dslaunch eval: " << error.what() << "\n";
    return kFailed;
  }
}

}  // namespace dslaunch::launcher
