// Training end to end: text through the tokenizer tool, a 2-rank `dslaunch
// run`, `dslaunch export`, and `dslaunch eval` checked against the loss the
// trainer logged for the same weights and against an independent PyTorch
// implementation reading the exported file.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

// Sentences from a tiny grammar: text with structure a small model learns
// in a few dozen steps.
std::string sentences(int count, uint64_t seed) {
  const std::vector<std::string> subjects = {"the cat", "a dog", "my friend", "the old man"};
  const std::vector<std::string> verbs = {"sees", "likes", "finds", "carries"};
  const std::vector<std::string> objects = {"a red ball", "the small box", "an apple", "the map"};
  std::mt19937_64 engine(seed);
  std::string text;
  for (int i = 0; i < count; ++i) {
    text +=
        subjects[engine() % 4] + " " + verbs[engine() % 4] + " " + objects[engine() % 4] + ".\n";
  }
  return text;
}

// The lines of metrics.jsonl whose "what" is `what` ("" = the step lines,
// which have none).
std::vector<nlohmann::json> read_metrics(const fs::path& path, const std::string& what = "") {
  std::vector<nlohmann::json> lines;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    nlohmann::json json = nlohmann::json::parse(line);
    if (json.value("what", "") == what) lines.push_back(std::move(json));
  }
  return lines;
}

// A 2-rank job of a tiny model on train.bin and valid.bin in `dir`.
fs::path write_tiny_spec(const fs::path& dir, int steps) {
  const fs::path spec = dir / "tiny.yaml";
  std::ofstream file(spec);
  file << fmt::format(R"(name: tiny
cluster: {{device: cpu, num_gpus: 2}}
model:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 2
  vocab_size: 256
  seq_length: 32
  make_vocab_size_divisible_by: 64
data: {{train: train.bin, valid: valid.bin}}
training:
  train_batch_size: 8
  train_micro_batch_size_per_gpu: 4
  steps: {}
  eval_interval: 10
  eval_batches: 4
  gradient_clipping: 1.0
  zero_optimization: {{reduce_bucket_size: 20000}}
  optimizer: {{type: AdamW, params: {{lr: 0.003, weight_decay: 0.1}}}}
fault_tolerance: {{heartbeat_interval: 1, heartbeat_timeout: 60}}
)",
                      steps);
  return spec;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Text through the tokenizer tool into train.bin and valid.bin in `dir`.
void tokenize_corpus(const fs::path& dir) {
  {
    std::ofstream text(dir / "corpus.txt");
    text << sentences(3000, 5);
  }
  const auto tokenized = run_command(
      fmt::format("{} {} --out {} --valid-out {} --valid-fraction 0.1 2>&1",
                  runfile("tools/tokenize/tokenize_text"), (dir / "corpus.txt").string(),
                  (dir / "train.bin").string(), (dir / "valid.bin").string()));
  INFO(tokenized.output);
  REQUIRE(tokenized.exit_code == 0);
}

struct Workspace {
  fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / "train_e2e";
  std::string env;

  Workspace() {
    fs::create_directories(dir);
    env = fmt::format("DSLAUNCH_HOME='{}' DSLAUNCH_WORKER='{}'", dir.string(),
                      runfile("worker/dsworker"));
  }
  dslaunch::testing::CommandResult dslaunch(const std::string& args) const {
    return run_command(env + " " + runfile("launcher/dslaunch") + " " + args + " 2>&1");
  }
};

TEST_CASE("a 2-rank training job trains, exports, and evaluates to the loss it logged") {
  const Workspace w;
  tokenize_corpus(w.dir);

  const fs::path spec = write_tiny_spec(w.dir, 30);
  const fs::path job = w.dir / "jobs" / "tiny-run";
  const auto run =
      w.dslaunch(fmt::format("run {} --job-dir {} --progress off", spec.string(), job.string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);

  // One metrics line per step from rank 0, evaluation every 10 steps.
  const std::vector<nlohmann::json> metrics = read_metrics(job / "metrics.jsonl");
  REQUIRE(metrics.size() == 30);
  // Every rank's memory by kind, once, before the first step.
  const std::vector<nlohmann::json> memory = read_metrics(job / "metrics.jsonl", "memory");
  REQUIRE(memory.size() == 2);
  for (const auto& line : memory) {
    CHECK(line["step"] == 0);
    CHECK(line["optimizer_states_bytes"].get<double>() ==
          2 * line["parameters_bytes"].get<double>());
    CHECK(line["activations_bytes"].get<double>() > 0);
  }
  std::vector<double> eval_losses;
  for (size_t i = 0; i < metrics.size(); ++i) {
    CHECK(metrics[i]["step"] == static_cast<int>(i + 1));
    CHECK(metrics[i]["rank"] == 0);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "tflops", "step_time_s",
                            "forward_s", "backward_s", "gradient_wait_s", "optimizer_s"}) {
      REQUIRE(metrics[i].contains(key));
    }
    // The wall-clock breakdown: parts of the step, each measured.
    const auto seconds = [&](const char* key) { return metrics[i][key].get<double>(); };
    CHECK(seconds("forward_s") > 0);
    CHECK(seconds("backward_s") > 0);
    CHECK(seconds("gradient_wait_s") >= 0);
    CHECK(seconds("optimizer_s") > 0);
    CHECK(seconds("forward_s") + seconds("backward_s") + seconds("gradient_wait_s") +
              seconds("optimizer_s") <=
          seconds("step_time_s"));
    if (metrics[i].contains("eval_loss")) eval_losses.push_back(metrics[i]["eval_loss"]);
  }
  REQUIRE(eval_losses.size() == 3);
  // The heartbeats carried the last step's loss and every rank's memory.
  nlohmann::json state;
  std::ifstream(job / "state.json") >> state;
  CHECK(state["loss"].get<double>() == Approx(metrics.back()["loss"].get<double>()));
  CHECK(state["tokens_per_s"].get<double>() > 0);
  REQUIRE(state["ranks"].size() == 2);
  for (const auto& rank : state["ranks"]) {
    // 4 bytes per parameter each for weights and gradients, 8 for Adam.
    CHECK(rank["memory"]["optimizer_states"].get<int64_t>() ==
          2 * rank["memory"]["parameters"].get<int64_t>());
    CHECK(rank["memory"]["activations"].get<int64_t>() > 0);
    // The process's resident peak holds at least its model states and
    // activations (and its libraries and buffers: not much more here).
    const int64_t accounted = rank["memory"]["parameters"].get<int64_t>() +
                              rank["memory"]["gradients"].get<int64_t>() +
                              rank["memory"]["optimizer_states"].get<int64_t>() +
                              rank["memory"]["activations"].get<int64_t>();
    CHECK(rank["memory"]["peak_rss_bytes"].get<int64_t>() > accounted);
    CHECK(rank["memory"]["peak_rss_bytes"].get<int64_t>() >=
          rank["memory"]["rss_bytes"].get<int64_t>());
    CHECK(rank["memory"]["peak_rss_bytes"].get<int64_t>() < accounted + (int64_t{2} << 30));
  }
  CHECK(metrics.front()["loss"].get<double>() == Approx(std::log(256.0)).epsilon(0.05));
  CHECK(eval_losses.back() < 0.75 * metrics.front()["loss"].get<double>());

  const fs::path exported = w.dir / "export" / "model.safetensors";
  fs::create_directories(exported.parent_path());
  const auto exporting =
      w.dslaunch(fmt::format("export {} --out {}", job.string(), exported.string()));
  INFO(exporting.output);
  REQUIRE(exporting.exit_code == 0);
  nlohmann::json config;
  std::ifstream(exported.parent_path() / "config.json") >> config;
  CHECK(config["n_layer"] == 2);
  CHECK(config["n_head"] == 2);
  CHECK(config["n_embd"] == 64);
  CHECK(config["vocab_size"] == 256);
  CHECK(config["n_positions"] == 32);

  const std::string eval_args =
      fmt::format("--weights {} --tokens {} --batch 4 --seq 32 --batches 4", exported.string(),
                  (w.dir / "valid.bin").string());
  const auto evaluated = w.dslaunch("eval " + eval_args + " --n-head 2 --json");
  INFO(evaluated.output);
  REQUIRE(evaluated.exit_code == 0);
  const double ours =
      nlohmann::json::parse(evaluated.output.substr(evaluated.output.rfind('{')))["loss"];
  CHECK(ours == Approx(eval_losses.back()).epsilon(1e-5));

  // The same weights in an independent implementation.
  const auto reference =
      run_command(fmt::format("/usr/bin/python3 {} eval {} --n-head 2 2>&1",
                              runfile("tools/reference/gpt2_reference.py"), eval_args));
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  const double torch_loss =
      nlohmann::json::parse(reference.output.substr(reference.output.rfind('{')))["loss"];
  CHECK(ours == Approx(torch_loss).epsilon(1e-5));
}

TEST_CASE("2 stage 3 ranks export the final weights streamed, and fail, not hang, where they cannot") {
  const Workspace w;
  tokenize_corpus(w.dir);
  const fs::path spec = write_tiny_spec(w.dir, 10);
  const std::string stage3 =
      "--set training.zero_optimization.stage=3 --set fault_tolerance.max_restarts=0";
  // Streamed from the partitions: the final checkpoint's weights.
  const fs::path job = w.dir / "jobs" / "stage3";
  const auto run = w.dslaunch(fmt::format("run {} --job-dir {} --progress off {}", spec.string(),
                                          job.string(), stage3));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const fs::path exported = w.dir / "stage3-export.safetensors";
  const auto exporting = w.dslaunch(fmt::format(
      "export {} --out {}", (job / "checkpoints" / "step_00000010").string(), exported.string()));
  INFO(exporting.output);
  REQUIRE(exporting.exit_code == 0);
  CHECK(file_bytes(exported) == file_bytes(job / "weights" / "model.safetensors"));
  // Rank 0 cannot make the weights folder (a file has its name): it still
  // makes the reads the other rank gathers with, and the job fails naming
  // the folder.
  const fs::path blocked = w.dir / "jobs" / "blocked";
  fs::create_directories(blocked);
  std::ofstream(blocked / "weights") << "not a folder";
  const auto failed = w.dslaunch(fmt::format("run {} --job-dir {} --progress off {}",
                                             spec.string(), blocked.string(), stage3));
  INFO(failed.output);
  CHECK(failed.exit_code != 0);
  CHECK_THAT(failed.output, Catch::Contains("writing the final weights") &&
                                Catch::Contains((blocked / "weights").string()));
}

TEST_CASE("dslaunch stop ends a training job after a step, with its weights and last evaluation") {
  const Workspace w;
  tokenize_corpus(w.dir);
  const fs::path spec = write_tiny_spec(w.dir, 1000000);
  // Rank 1 takes 11 s over step 4, the one the stop lands on: the stop
  // waits for it, longer than the launcher's 10 s grace for an exit.
  std::ofstream(spec, std::ios::app)
      << "testing: {fault: {kind: slow, rank: 1, step: 4, seconds: 11}}\n";
  const fs::path job = w.dir / "jobs" / "tiny-stop";
  const std::string dslaunch = w.env + " " + runfile("launcher/dslaunch");
  // Start the run, wait for 3 steps' metrics, stop it, and wait for the run.
  const auto stopped = run_command(fmt::format(
      "({0} run {1} --job-dir {2} --progress off > {3}/run.out 2>&1; echo $? > {3}/run.rc) & "
      "for i in $(seq 1200); do [ -f {2}/metrics.jsonl ] && "
      "[ $(wc -l < {2}/metrics.jsonl) -ge 5 ] && break; sleep 0.1; done; "
      "{0} stop {2} 2>&1; wait",
      dslaunch, spec.string(), job.string(), w.dir.string()));
  INFO(stopped.output);
  // What the run and its ranks said, for a failure's sake.
  INFO(file_bytes(w.dir / "run.out"));
  INFO(file_bytes(job / "events.jsonl"));
  std::string rc;
  std::ifstream(w.dir / "run.rc") >> rc;
  CHECK(rc == "3");  // STOPPED
  nlohmann::json state;
  std::ifstream(job / "state.json") >> state;
  CHECK(state["state"] == "STOPPED");
  const std::vector<nlohmann::json> metrics = read_metrics(job / "metrics.jsonl");
  REQUIRE(metrics.size() >= 3);
  CHECK(metrics.size() < 1000000);
  CHECK(metrics.back().contains("eval_loss"));  // the last step evaluated
  CHECK(fs::is_regular_file(job / "weights" / "model.safetensors"));
  CHECK(fs::is_regular_file(job / "weights" / "config.json"));
  // Both ranks stopped after step 4 and exited on their own, 11 s after
  // the request: nothing was killed.
  const std::vector<nlohmann::json> events = read_metrics(job / "events.jsonl");
  const auto count = [&events](const std::string& kind, const std::string& detail) {
    return std::count_if(events.begin(), events.end(), [&](const nlohmann::json& event) {
      return event["kind"] == kind && (detail.empty() || event["detail"] == detail);
    });
  };
  CHECK(count("stopped", "after step 4") == 2);
  CHECK(count("terminating", "") == 0);
}

// An llm.c token file of `tokens` (header: magic, version, count; then uint16).
void write_token_file(const fs::path& path, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(header.data()), 256 * sizeof(int32_t));
  file.write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
}

// The tiny model starting from `weights` on `tokens` (4 windows of 32 + 1
// tokens: the first step's batch of 4 is all of them), for one step, under
// `parallelism` on `ranks` ranks.
fs::path write_init_spec(const fs::path& dir, const std::string& name, const fs::path& weights,
                         const fs::path& tokens, int ranks, const std::string& parallelism,
                         int micro_batch, int layers = 2) {
  const fs::path spec = dir / (name + ".yaml");
  std::ofstream(spec) << fmt::format(R"(name: {}
cluster: {{device: cpu, num_gpus: {}}}
model: {{num_layers: {}, hidden_size: 64, num_attention_heads: 2, vocab_size: 256, seq_length: 32,
        make_vocab_size_divisible_by: 64}}
parallelism: {}
data: {{train: {}, valid: {}}}
training:
  train_batch_size: 4
  train_micro_batch_size_per_gpu: {}
  steps: 1
  eval_batches: 1
  init_from: {}
  optimizer: {{type: AdamW, params: {{lr: 0.003}}}}
fault_tolerance: {{heartbeat_interval: 1, heartbeat_timeout: 60}}
)",
                                     name, ranks, layers, parallelism, tokens.string(),
                                     tokens.string(), micro_batch, weights.string());
  return spec;
}

TEST_CASE("training.init_from starts at the loss its weights have, on 1 rank and on 2 x 2") {
  const Workspace w;
  tokenize_corpus(w.dir);
  const fs::path trained = w.dir / "jobs" / "tiny-trained";
  const auto run = w.dslaunch(fmt::format("run {} --job-dir {} --progress off",
                                          write_tiny_spec(w.dir, 8).string(), trained.string()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const fs::path weights = trained / "weights" / "model.safetensors";

  // Four windows of the evaluation text the model has not trained on.
  std::vector<uint16_t> tokens;
  {
    std::ifstream valid(w.dir / "valid.bin", std::ios::binary);
    valid.seekg(256 * sizeof(int32_t));
    tokens.resize(4 * 32 + 1);
    valid.read(reinterpret_cast<char*>(tokens.data()),
               static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
    REQUIRE(valid.gcount() == static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  }
  const fs::path window_file = w.dir / "four_windows.bin";
  write_token_file(window_file, tokens);
  const auto evaluated =
      w.dslaunch(fmt::format("eval --weights {} --tokens {} --batch 4 --seq 32 --batches 1 --json",
                             weights.string(), window_file.string()));
  INFO(evaluated.output);
  REQUIRE(evaluated.exit_code == 0);
  const double expected =
      nlohmann::json::parse(evaluated.output.substr(evaluated.output.rfind('{')))["loss"];
  CHECK(expected < 0.9 * std::log(256.0));  // trained weights, not a fresh model's

  struct Layout {
    const char* name;
    int ranks;
    const char* parallelism;
    int micro_batch;
  };
  // One rank; data 2 x tensor 2; data 2 x pipeline 2 (two micro-batches).
  for (const Layout& layout : {Layout{"init-1", 1, "{}", 4}, Layout{"init-2x2", 4, "{tensor: 2}", 2},
                               Layout{"init-pp2", 4, "{pipeline: 2}", 1}}) {
    INFO(layout.name);
    const fs::path job = w.dir / "jobs" / layout.name;
    const auto started = w.dslaunch(
        fmt::format("run {} --job-dir {} --progress off",
                    write_init_spec(w.dir, layout.name, weights, window_file, layout.ranks,
                                    layout.parallelism, layout.micro_batch)
                        .string(),
                    job.string()));
    INFO(started.output);
    REQUIRE(started.exit_code == 0);
    const std::vector<nlohmann::json> metrics = read_metrics(job / "metrics.jsonl");
    REQUIRE(metrics.size() == 1);
    CHECK(metrics.front()["loss"].get<double>() == Approx(expected).epsilon(1e-5));
  }

  // Weights of another shape are refused before any rank starts.
  const auto wrong = w.dslaunch(fmt::format(
      "plan {}", write_init_spec(w.dir, "init-wrong", weights, window_file, 1, "{}", 4, 3).string()));
  CHECK(wrong.exit_code != 0);
  CHECK_THAT(wrong.output, Catch::Contains("training.init_from") &&
                               Catch::Contains("2 layers where model.num_layers is 3"));
}

TEST_CASE("export and eval refuse what they cannot read, naming it") {
  const Workspace w;
  const auto no_job = w.dslaunch("export no-such-job --out x.safetensors");
  CHECK(no_job.exit_code == 2);
  CHECK_THAT(no_job.output, Catch::Contains("no job 'no-such-job'"));

  { std::ofstream(w.dir / "broken.safetensors") << "not a safetensors file"; }
  const auto broken =
      w.dslaunch(fmt::format("eval --weights {} --tokens x --n-head 2 --batch 1 --seq 8",
                             (w.dir / "broken.safetensors").string()));
  CHECK(broken.exit_code == 2);
  CHECK_THAT(broken.output, Catch::Contains("broken.safetensors"));
}

}  // namespace
