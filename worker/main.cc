// dsworker: the per-rank daemon that `dslaunch run` starts under mpirun or
// srun. Parsing and exit codes are handled here only.
#include <iostream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/escaped_exception.h"
#include "kernels/cpu/blas_setup.h"
#include "tools/build_info/build_info.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/comm/mpi_world_probe.h"
#include "worker/eval_command.h"
#include "worker/generate_command.h"
#include "worker/selftest_command.h"
#include "worker/worker_run.h"

namespace {

constexpr int kUsageError = 2;

nlohmann::json identity_json(const dslaunch::worker::comm::RankIdentity& id) {
  return {{"rank", id.rank},
          {"world_size", id.world_size},
          {"local_rank", id.local_rank},
          {"local_world_size", id.local_world_size},
          {"host", id.host},
          {"pid", id.pid}};
}

void print_probe(const dslaunch::worker::comm::WorldProbe& probe, bool as_json) {
  if (as_json) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& id : probe.ranks) ranks.push_back(identity_json(id));
    std::cout << nlohmann::json{{"mpi_library", probe.mpi_library},
                                {"world_size", probe.self.world_size},
                                {"allreduce_ok", probe.allreduce_ok},
                                {"ranks", ranks}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << fmt::format("{}\n{} ranks, all-reduce check {}\n\n", probe.mpi_library,
                           probe.self.world_size, probe.allreduce_ok ? "ok" : "FAILED");
  std::cout << fmt::format("{:>6}  {:<24} {:>9}  {}\n", "rank", "host", "pid", "local rank");
  for (const auto& id : probe.ranks) {
    std::cout << fmt::format("{:>6}  {:<24} {:>9}  {} of {}\n", id.rank, id.host, id.pid,
                             id.local_rank, id.local_world_size);
  }
}

// Every rank must run this (it is collective); rank 0 prints.
int run_probe(bool as_json) {
  if (const auto started = dslaunch::worker::comm::mpi_init(); !started.ok()) {
    std::cerr << "dsworker: " << started.message() << "\n";
    return 1;
  }
  const auto probe = dslaunch::worker::comm::probe_mpi_world();
  int exit_code = 0;
  if (!probe.error.empty()) {
    std::cerr << fmt::format("dsworker rank {}: {}\n", probe.self.rank, probe.error);
    exit_code = 1;
  } else {
    if (probe.self.rank == 0) print_probe(probe, as_json);
    if (!probe.allreduce_ok) exit_code = 1;
  }
  dslaunch::worker::comm::mpi_finalize();
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) try {
  // OpenBLAS picks its kernels when it loads, before MPI or any thread
  // starts: restart once with the fastest core type this CPU supports.
  dslaunch::kernels::ensure_fast_blas(argv);
  CLI::App app{"dsworker is the per-rank daemon of a dslaunch job, started by `dslaunch run`.",
               "dsworker"};
  app.set_version_flag("--version", dslaunch::version_line("dsworker"),
                       "Print the version and git commit, then exit");
  app.require_subcommand(0, 1);

  bool probe_json = false;
  CLI::App* probe = app.add_subcommand(
      "probe",
      "Check the ranks' MPI world: every rank's host, pid and node-local rank, and an "
      "all-reduce verified end to end (run under mpirun)");
  probe->add_flag("--json", probe_json, "Print one JSON object instead of a table");

  CLI::App* run = app.add_subcommand(
      "run",
      "Run this rank of a job: started by `dslaunch run` through mpirun or srun, configured by "
      "the environment it sets (DSL_CONTROLLER, DSL_JOB_TOKEN, ...)");

  dslaunch::worker::EvalOptions eval_options;
  CLI::App* eval = app.add_subcommand(
      "eval", "Mean cross-entropy of GPT-2 weights over consecutive windows of a token file");
  eval->add_option("--weights", eval_options.weights, "GPT-2 weights (.safetensors)")->required();
  eval->add_option("--tokens", eval_options.tokens, "llm.c token file, or Megatron dataset prefix")
      ->required();
  eval->add_option("--n-head", eval_options.num_heads,
                   "Attention heads (default: n_head from a config.json beside the weights)");
  eval->add_option("--batch", eval_options.batch, "Rows per batch (B)")->required();
  eval->add_option("--seq", eval_options.seq, "Tokens per row (T)")->required();
  eval->add_option("--batches", eval_options.batches,
                   "Batches to evaluate (default: every whole batch in the file)");
  eval->add_option("--threads", eval_options.threads, "Compute threads (default: every core)");
  eval->add_flag("--json", eval_options.json, "Print {\"loss\": ...} as JSON");

  dslaunch::worker::GenerateOptions generate_options;
  CLI::App* generate = app.add_subcommand(
      "generate", "Sample a continuation of a prompt from GPT-2 weights, with a KV cache");
  generate
      ->add_option("--weights", generate_options.weights,
                   "GPT-2 weights (.safetensors), or a folder holding "
                   "weights/model.safetensors (a job directory) or model.safetensors")
      ->required();
  CLI::Option* prompt_text = generate->add_option(
      "--prompt", generate_options.prompt,
      "Text to continue: its bytes for a byte-level model, else encoded by the tokenizer "
      "(default: a new line, or the tokenizer's <|endoftext|>)");
  generate
      ->add_option("--prompt-tokens", generate_options.prompt_tokens,
                   "Token ids to continue, as 1,2,3 (any vocabulary)")
      ->delimiter(',')
      ->excludes(prompt_text);
  CLI::Option* tokenizer = generate->add_option(
      "--tokenizer", generate_options.tokenizer_json,
      "GPT-2 BPE tokenizer: Hugging Face's tokenizer.json (default: tokenizer.json, or "
      "vocab.json with merges.txt, beside the weights)");
  generate
      ->add_option("--vocab", generate_options.vocab,
                   "GPT-2 BPE vocabulary: OpenAI's vocab.json (with --merges)")
      ->excludes(tokenizer);
  generate
      ->add_option("--merges", generate_options.merges,
                   "GPT-2 BPE merges: OpenAI's merges.txt (with --vocab)")
      ->excludes(tokenizer);
  generate->add_option("--tokens", generate_options.tokens,
                       "New tokens to draw (default: until the model's seq_length is full)");
  generate->add_option("--temperature", generate_options.sampling.temperature,
                       "0: greedy (the likeliest token); above 0: softmax(logits / T) (default 1)");
  generate->add_option("--top-k", generate_options.sampling.top_k,
                       "Draw among the K likeliest tokens only (default 0: all)");
  generate->add_option(
      "--seed", generate_options.sampling.seed,
      fmt::format("Seed of the draws: the same seed gives the same tokens (default {})",
                  dslaunch::worker::model::kDefaultSamplingSeed));
  generate->add_option("--n-head", generate_options.num_heads,
                       "Attention heads (default: n_head from a config.json beside the weights)");
  generate->add_option("--threads", generate_options.threads,
                       "Compute threads (default: every core)");
  generate->add_flag("--json", generate_options.json,
                     "Print {\"tokens\": [...], \"text\": ...} when done instead of streaming");

  dslaunch::worker::SelftestOptions selftest_options;
  CLI::App* selftest = app.add_subcommand(
      "selftest",
      "Check a device: every kernel against the CPU backend in each precision, and a short "
      "training run on both");
  selftest
      ->add_option("--device", selftest_options.device,
                   "cuda (the first visible GPU) or emulated (the CUDA kernels' code on the CPU "
                   "emulator of CUDA's thread model)")
      ->capture_default_str();
  selftest->add_option("--steps", selftest_options.steps, "Steps of each training comparison")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  selftest->add_option("--seed", selftest_options.seed, "Seed of the random inputs")
      ->capture_default_str();
  selftest
      ->add_option("--threads", selftest_options.threads,
                   "The CPU reference's compute threads (default: every core)")
      ->check(CLI::Range(1, 4096));
  selftest->add_flag("--json", selftest_options.json, "Print one JSON object instead of a table");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kUsageError;
  }
  if (probe->parsed()) return run_probe(probe_json);
  if (run->parsed()) return dslaunch::worker::run_worker();
  if (eval->parsed()) return dslaunch::worker::run_eval_command(eval_options);
  if (generate->parsed()) return dslaunch::worker::run_generate_command(generate_options);
  if (selftest->parsed()) return dslaunch::worker::run_selftest_command(selftest_options);
  std::cerr << app.help() << "\ndsworker: a subcommand is required\n";
  return kUsageError;
} catch (...) {
  return dslaunch::core::report_escaped_exception("dsworker");
}
