#include "launcher/model_commands.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/errno_status.h"
#include "core/weights/hf_gpt2.h"
#include "launcher/checkpoint_export.h"
#include "launcher/job_commands.h"
#include "launcher/worker_binary.h"

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
  const bool checkpoints_here = fs::is_regular_file(fs::path(source) / "manifest.json") ||
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

// Runs `dsworker ARGS...` in place of this process, args[0] naming the
// subcommand; returns 1 if it cannot.
int run_worker_subcommand(const std::vector<std::string>& args) {
  const std::string command = args.at(0);
  const std::string worker = find_worker_binary("");
  if (worker.empty()) {
    std::cerr << fmt::format(
        "dslaunch {}: cannot find dsworker beside dslaunch; set DSLAUNCH_WORKER\n", command);
    return kFailed;
  }
  std::vector<char*> pointers = {const_cast<char*>(worker.c_str())};
  for (const std::string& arg : args) pointers.push_back(const_cast<char*>(arg.c_str()));
  pointers.push_back(nullptr);
  execv(worker.c_str(), pointers.data());
  std::cerr << fmt::format("dslaunch {}: cannot run {}: {}\n", command, worker,
                           core::errno_text(errno));
  return kFailed;
}

// Replaces the value of `--weights V` or `--weights=V` in args by the job
// directory V names when V is no file or folder: jobs are found by id here,
// where the job registry is, and the worker reads the directory. False with
// `error` set when V is neither a path nor a job.
bool resolve_job_weights(std::vector<std::string>& args, std::string& error) {
  const std::string flag = "--weights";
  for (size_t i = 0; i < args.size(); ++i) {
    std::string* value = nullptr;
    std::string inline_value;
    if (args[i] == flag && i + 1 < args.size()) {
      value = &args[i + 1];
    } else if (args[i].rfind(flag + "=", 0) == 0) {
      inline_value = args[i].substr(flag.size() + 1);
      value = &inline_value;
    }
    if (value == nullptr || value->empty() || fs::exists(*value)) continue;
    const auto job = find_job(*value, error);
    if (!job) {
      error = fmt::format("--weights {} is no file, folder or job: {}", *value, error);
      return false;
    }
    if (value == &inline_value) {
      args[i] = flag + "=" + job->path();
    } else {
      *value = job->path();
    }
  }
  return true;
}

}  // namespace

int run_export_command(const std::string& source, const std::string& out) {
  std::string error;
  const std::optional<ExportSource> from = export_source_of(source, error);
  if (!from) {
    std::cerr << "dslaunch export: " << error << "\n";
    return kBadInput;
  }
  core::Gpt2Config config;
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
    core::HfGpt2Weights loaded = core::load_hf_gpt2(from->weights, 0, 1);
    if (!loaded.error.empty()) {
      std::cerr << "dslaunch export: " << loaded.error << "\n";
      return kFailed;
    }
    config = loaded.config;
    params = std::move(loaded.params);
  }
  const core::ParameterTable table(config);
  std::error_code ignored;  // a folder that cannot be made fails the write below, with its name
  fs::create_directories(fs::absolute(out).parent_path(), ignored);
  if (!core::write_hf_gpt2(out, table, params.data(), error)) {
    std::cerr << "dslaunch export: " << error << "\n";
    return kFailed;
  }
  std::cout << fmt::format(
      "{}: {} layers, {} channels, {} heads, vocabulary {}; config.json "
      "beside it\n",
      out, config.num_layers, config.channels, config.num_heads, config.vocab_size);
  return 0;
}

int run_eval_command(int argc, char** argv) {
  return run_worker_subcommand(std::vector<std::string>(argv + 1, argv + argc));
}

int run_selftest_command(int argc, char** argv) {
  return run_worker_subcommand(std::vector<std::string>(argv + 1, argv + argc));
}

int run_generate_command(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);  // args[0] is "generate"
  std::string error;
  if (!resolve_job_weights(args, error)) {
    std::cerr << "dslaunch generate: " << error << "\n";
    return kBadInput;
  }
  return run_worker_subcommand(args);
}

}  // namespace dslaunch::launcher
