// `dsworker generate` and `dslaunch generate` end to end, on weights the
// test writes where a job keeps its own.
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/layout/parameter_table.h"
#include "core/weights/hf_gpt2.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_files.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch {
namespace {

namespace fs = std::filesystem;
using testing::run_command;
using testing::runfile;

// Writes GPT-2 weights with GPT-2's initialisation, and config.json beside.
void write_model(const fs::path& file, int64_t vocab, int64_t max_seq_len) {
  core::Gpt2Config config;
  config.num_layers = 2;
  config.channels = 32;
  config.num_heads = 2;
  config.vocab_size = vocab;
  config.padded_vocab_size = vocab;
  config.max_seq_len = max_seq_len;
  const core::ParameterTable table(config);
  std::vector<float> params(static_cast<size_t>(table.total()));
  worker::model::init_gpt2_parameters(table, 5, params.data());
  fs::create_directories(file.parent_path());
  std::string error;
  REQUIRE(core::write_hf_gpt2(file.string(), table, params.data(), error));
}

// A job directory under $DSLAUNCH_HOME/jobs holding a byte-level model's
// final weights, and a model of 300 tokens beside it.
struct Models {
  testing::TempDir dir;
  fs::path home = fs::path(dir.path()) / "home";
  fs::path job = home / "jobs" / "gen-test-0001";
  fs::path tokens = fs::path(dir.path()) / "tokens" / "model.safetensors";

  Models() {
    write_model(job / "weights" / "model.safetensors", 256, 48);
    testing::write_bytes((job / "state.json").string(), "{}\n");
    write_model(tokens, 300, 48);
  }

  testing::CommandResult dsworker(const std::string& args) const {
    // In braces, so that a redirection of stdout in args leaves stderr to
    // the captured output.
    return run_command("{ " + runfile("worker/dsworker") + " generate --threads 1 " + args + "; }");
  }
  testing::CommandResult dslaunch(const std::string& args) const {
    return run_command(
        fmt::format("DSLAUNCH_HOME='{}' DSLAUNCH_WORKER='{}' {} generate --threads 1 {}",
                    home.string(), runfile("worker/dsworker"), runfile("launcher/dslaunch"), args));
  }
  // Only what the command prints on stdout, which must be JSON.
  nlohmann::json json(const std::string& args) const {
    const std::string out = dir.file("out.json");
    const auto result = dsworker(args + " --json > " + out);
    INFO(result.output);
    REQUIRE(result.exit_code == 0);
    return nlohmann::json::parse(testing::read_bytes(out));
  }
};

std::string as_bytes(const std::vector<int32_t>& tokens) {
  std::string text;
  for (const int32_t token : tokens) text.push_back(static_cast<char>(token));
  return text;
}

TEST_CASE("dsworker generate prints the prompt and its continuation, the same for the same seed") {
  const Models m;
  const std::string args = fmt::format("--weights {} --prompt Hello --tokens 20", m.job.string());
  const auto first = m.dsworker(args + " --seed 7");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(first.output.size() == 5 + 20 + 1);
  CHECK(first.output.rfind("Hello", 0) == 0);
  CHECK(first.output.back() == '\n');
  CHECK(m.dsworker(args + " --seed 7").output == first.output);
  CHECK(m.dsworker(args + " --seed 8").output != first.output);

  // --json holds the same tokens as the streamed text.
  const nlohmann::json json = m.json(args + " --seed 7");
  const auto tokens = json["tokens"].get<std::vector<int32_t>>();
  CHECK(json["prompt_length"] == 5);
  CHECK(as_bytes(tokens) + "\n" == first.output);
  CHECK(json["text"].is_string());
}

TEST_CASE("greedy generation is deterministic and equals top-k 1") {
  const Models m;
  const std::string args = fmt::format("--weights {} --prompt 'The ' --tokens 30",
                                       (m.job / "weights" / "model.safetensors").string());
  const auto greedy = m.json(args + " --temperature 0");
  CHECK(greedy["tokens"].size() == 34);
  CHECK(m.json(args + " --temperature 0") == greedy);
  CHECK(m.json(args + " --top-k 1 --seed 99") == greedy);
}

TEST_CASE("generation stops at the model's seq_length, saying so") {
  const Models m;
  const std::string out = m.dir.file("out.json");
  const auto result = m.dsworker(
      fmt::format("--weights {} --prompt abc --tokens 1000 --json > {}", m.job.string(), out));
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("45 new after the prompt's 3, not 1000") != std::string::npos);
  CHECK(nlohmann::json::parse(testing::read_bytes(out))["tokens"].size() == 48);

  const auto full =
      m.dsworker(fmt::format("--weights {} --prompt {}", m.job.string(), std::string(48, 'x')));
  CHECK(full.exit_code == 2);
  CHECK(full.output.find("leaving no room to generate") != std::string::npos);
}

TEST_CASE("a vocabulary that is not bytes takes and prints token ids") {
  const Models m;
  const auto text =
      m.dsworker(fmt::format("--weights {} --prompt hi --n-head 2", m.tokens.string()));
  CHECK(text.exit_code == 2);
  CHECK(text.output.find("a prompt as text needs a byte-level model; pass --prompt-tokens") !=
        std::string::npos);

  const std::string args =
      fmt::format("--weights {} --prompt-tokens 1,2,299 --tokens 5 --seed 3", m.tokens.string());
  const nlohmann::json json = m.json(args);
  const auto tokens = json["tokens"].get<std::vector<int32_t>>();
  REQUIRE(tokens.size() == 8);
  CHECK(std::vector<int32_t>(tokens.begin(), tokens.begin() + 3) ==
        std::vector<int32_t>{1, 2, 299});
  CHECK(json["text"].is_null());
  const auto ids = m.dsworker(args);
  REQUIRE(ids.exit_code == 0);
  std::string expected;
  for (const int32_t token : tokens)
    expected += (expected.empty() ? "" : " ") + std::to_string(token);
  CHECK(ids.output == expected + "\n");

  const auto outside =
      m.dsworker(fmt::format("--weights {} --prompt-tokens 300", m.tokens.string()));
  CHECK(outside.exit_code == 2);
  CHECK(outside.output.find("outside the model's vocabulary [0, 300)") != std::string::npos);
}

TEST_CASE("dslaunch generate reads a job's weights by id, prefix or directory") {
  const Models m;
  const std::string rest = "--prompt Hello --tokens 20 --seed 7";
  const auto worker = m.dsworker(fmt::format("--weights {} {}", m.job.string(), rest));
  REQUIRE(worker.exit_code == 0);
  for (const std::string& job :
       {std::string("gen-test-0001"), std::string("gen-test"), m.job.string()}) {
    INFO(job);
    const auto launched = m.dslaunch(fmt::format("--weights {} {}", job, rest));
    CHECK(launched.exit_code == 0);
    CHECK(launched.output == worker.output);
  }
  CHECK(m.dslaunch(fmt::format("--weights={} {}", "gen-test", rest)).output == worker.output);

  const auto missing = m.dslaunch("--weights no-such-job " + rest);
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("--weights no-such-job is no file, folder or job") !=
        std::string::npos);

  const auto help = m.dslaunch("--help");
  CHECK(help.exit_code == 0);
  CHECK(help.output.find("--top-k") != std::string::npos);
}

TEST_CASE("dsworker generate refuses bad sampling options and weights it cannot find") {
  const Models m;
  const auto cold = m.dsworker(fmt::format("--weights {} --temperature -1", m.job.string()));
  CHECK(cold.exit_code == 2);
  CHECK(cold.output.find("temperature -1") != std::string::npos);
  const auto empty = m.dsworker(fmt::format("--weights {}", m.dir.path()));
  CHECK(empty.exit_code == 2);
  CHECK(empty.output.find("holds neither weights/model.safetensors") != std::string::npos);
}

}  // namespace
}  // namespace dslaunch
