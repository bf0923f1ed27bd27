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
#include "tools/tokenize/bpe_tokenizer.h"
#include "tools/tokenize/byte_alphabet.h"
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
  CHECK(text.output.find("--prompt: text needs a byte-level model or a tokenizer (--tokenizer, "
                         "or --vocab with --merges, or those files beside the weights); or give "
                         "--prompt-tokens") != std::string::npos);
  const auto none = m.dsworker(fmt::format("--weights {} --n-head 2", m.tokens.string()));
  CHECK(none.exit_code == 2);
  CHECK(none.output.find("give --prompt-tokens: the model's vocabulary is not bytes") !=
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

// A GPT-2 BPE vocabulary of 260 tokens: the 256 bytes, three merges
// ("he", " t", " the") and <|endoftext|>, as vocab.json and merges.txt in
// `folder`.
void write_bpe_files(const fs::path& folder) {
  fs::create_directories(folder);
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) {
    vocab[tools::byte_character(static_cast<uint8_t>(byte))] = byte;
  }
  vocab["he"] = 256;
  vocab["\u0120t"] = 257;
  vocab["\u0120the"] = 258;
  vocab["<|endoftext|>"] = 259;
  testing::write_bytes((folder / "vocab.json").string(), vocab.dump());
  testing::write_bytes((folder / "merges.txt").string(),
                       "#version: 0.2\nh e\n\u0120 t\n\u0120t he\n");
}

std::string decoded(const fs::path& folder, const std::vector<int32_t>& tokens) {
  auto tokenizer = tools::BpeTokenizer::from_vocab_and_merges(
      (folder / "vocab.json").string(), (folder / "merges.txt").string());
  REQUIRE(tokenizer.ok());
  auto text = tokenizer->decode(tokens);
  REQUIRE(text.ok());
  return *text;
}

TEST_CASE("a model with a GPT-2 BPE tokenizer beside it, or given, takes and prints text") {
  const Models m;
  const fs::path model = fs::path(m.dir.path()) / "bpe" / "model.safetensors";
  write_model(model, 260, 48);
  write_bpe_files(model.parent_path());
  const std::string args = fmt::format("--weights {} --prompt ' the he' --tokens 12 --seed 5",
                                       model.string());
  const nlohmann::json json = m.json(args);
  const auto tokens = json["tokens"].get<std::vector<int32_t>>();
  REQUIRE(tokens.size() == 3 + 12);
  // " the" is one token, then " " and "he".
  CHECK(std::vector<int32_t>(tokens.begin(), tokens.begin() + 3) ==
        std::vector<int32_t>{258, 32, 256});
  CHECK(json["prompt_length"] == 3);
  CHECK(json["text"].is_string());
  // Streamed, the tokens' bytes as they are drawn.
  const auto streamed = m.dsworker(args);
  REQUIRE(streamed.exit_code == 0);
  CHECK(streamed.output == decoded(model.parent_path(), tokens) + "\n");
  CHECK(streamed.output.rfind(" the he", 0) == 0);

  // The same files named on the command line, from elsewhere.
  const fs::path elsewhere = fs::path(m.dir.path()) / "tokenizer";
  write_bpe_files(elsewhere);
  fs::remove(model.parent_path() / "vocab.json");
  CHECK(m.json(args + fmt::format(" --vocab {} --merges {}", (elsewhere / "vocab.json").string(),
                                  (elsewhere / "merges.txt").string())) == json);

  // No prompt: GPT-2's unconditional start, <|endoftext|>.
  const nlohmann::json unprompted =
      m.json(fmt::format("--weights {} --vocab {} --merges {} --tokens 4", model.string(),
                         (elsewhere / "vocab.json").string(), (elsewhere / "merges.txt").string()));
  CHECK(unprompted["prompt_length"] == 1);
  CHECK(unprompted["tokens"][0] == 259);
}

TEST_CASE("a tokenizer that does not fit the model, or half of one, is refused") {
  const Models m;
  const fs::path model = fs::path(m.dir.path()) / "small" / "model.safetensors";
  write_model(model, 258, 48);
  const fs::path files = fs::path(m.dir.path()) / "tokenizer";
  write_bpe_files(files);
  const std::string vocab = (files / "vocab.json").string();
  const std::string merges = (files / "merges.txt").string();
  const auto larger = m.dsworker(fmt::format("--weights {} --vocab {} --merges {} --prompt hi",
                                             model.string(), vocab, merges));
  CHECK(larger.exit_code == 2);
  CHECK_THAT(larger.output, Catch::Contains("has 260 tokens, more than the model's vocabulary "
                                            "of 258"));
  const auto half =
      m.dsworker(fmt::format("--weights {} --vocab {} --prompt hi", model.string(), vocab));
  CHECK(half.exit_code == 2);
  CHECK_THAT(half.output, Catch::Contains("--vocab and --merges go together"));
  const auto broken_dir = fs::path(m.dir.path()) / "broken";
  fs::create_directories(broken_dir);
  testing::write_bytes((broken_dir / "merges.txt").string(), "#version: 0.2\nq z\n");
  const auto broken = m.dsworker(fmt::format("--weights {} --vocab {} --merges {} --prompt hi",
                                             model.string(), vocab,
                                             (broken_dir / "merges.txt").string()));
  CHECK(broken.exit_code == 2);
  CHECK_THAT(broken.output, Catch::Contains((broken_dir / "merges.txt").string()));
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
