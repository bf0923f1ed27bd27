// tokenize_text with a GPT-2 vocabulary, end to end: the binary on files
// written here, its tokens checked against encoder.py (gpt2_bpe_reference.py).
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tests/support/temp_files.h"
#include "tests/tools/tokenize/reference_bpe.h"
#include "tools/tokenize/byte_alphabet.h"
#include "worker/data/llmc_token_file.h"

namespace dslaunch::tools {
namespace {

using Catch::Matchers::Contains;
using dslaunch::testing::read_bytes;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;
using dslaunch::testing::TempDir;
using dslaunch::testing::write_bytes;
using testing::reference_encode;
using testing::ReferenceVocabulary;
using testing::train_reference_vocabulary;

constexpr int kMerges = 300;

std::string tool() { return runfile("tools/tokenize/tokenize_text"); }

std::vector<int32_t> tokens_of(const std::string& path) {
  const auto opened = worker::data::open_llmc_token_file(path);
  REQUIRE(opened.error.empty());
  std::vector<int32_t> tokens(static_cast<size_t>(opened.source->size()));
  opened.source->read(0, opened.source->size(), tokens.data());
  return tokens;
}

// The documents' reference tokens, joined by the end-of-text token.
std::vector<int32_t> joined(const std::vector<std::vector<int32_t>>& documents,
                            int32_t end_of_text) {
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (i > 0) tokens.push_back(end_of_text);
    tokens.insert(tokens.end(), documents[i].begin(), documents[i].end());
  }
  return tokens;
}

int32_t end_of_text_id(const ReferenceVocabulary& files) {
  return nlohmann::json::parse(read_bytes(files.vocab))["<|endoftext|>"].get<int32_t>();
}

const std::string kText = "It's a test: we're here.\nCafé 日本語 😀  spaces\t\ttabs  \n";
const std::string kFirstLine = "Hello WORLD'S end";
const std::string kSecondLine = "line two\n with\u00a0more 123";

void write_inputs(const TempDir& dir) {
  write_bytes(dir.file("a.txt"), kText);
  write_bytes(dir.file("b.jsonl"), nlohmann::json{{"text", kFirstLine}}.dump() + "\n\n" +
                                       nlohmann::json{{"id", 2}, {"text", kSecondLine}}.dump() +
                                       "\n");
}

TEST_CASE(
    "tokenize_text --vocab --merges writes encoder.py's tokens, documents joined by "
    "<|endoftext|>") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  write_inputs(dir);
  const auto run =
      run_command(tool() + " " + dir.file("a.txt") + " " + dir.file("b.jsonl") + " --vocab " +
                  files.vocab + " --merges " + files.merges + " --out " + dir.file("out.bin"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::vector<int32_t> expected =
      joined(reference_encode(dir, files, {kText, kFirstLine, kSecondLine}), end_of_text_id(files));
  CHECK_THAT(run.output, Contains("wrote " + std::to_string(expected.size()) + " tokens to " +
                                  dir.file("out.bin")));
  CHECK(tokens_of(dir.file("out.bin")) == expected);
}

TEST_CASE("tokenize_text --tokenizer writes the same file as --vocab --merges") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  write_inputs(dir);
  const std::string inputs = dir.file("a.txt") + " " + dir.file("b.jsonl");
  REQUIRE(run_command(tool() + " " + inputs + " --vocab " + files.vocab + " --merges " +
                      files.merges + " --out " + dir.file("pair.bin"))
              .exit_code == 0);
  for (const std::string& tokenizer : {files.tokenizer_json, files.tokenizer_pairs_json}) {
    const auto run = run_command(tool() + " " + inputs + " --tokenizer " + tokenizer + " --out " +
                                 dir.file("json.bin"));
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    CHECK(read_bytes(dir.file("json.bin")) == read_bytes(dir.file("pair.bin")));
  }
}

TEST_CASE("tokenize_text splits BPE tokens with --valid-out and reads --jsonl-key") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  write_bytes(dir.file("c.jsonl"), nlohmann::json{{"body", kText}}.dump() + "\n" +
                                       nlohmann::json{{"body", kFirstLine}}.dump() + "\n");
  const auto run =
      run_command(tool() + " " + dir.file("c.jsonl") + " --tokenizer " + files.tokenizer_json +
                  " --jsonl-key body --out " + dir.file("t.bin") + " --valid-out " +
                  dir.file("v.bin") + " --valid-fraction 0.25");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::vector<int32_t> all = tokens_of(dir.file("t.bin"));
  const std::vector<int32_t> valid = tokens_of(dir.file("v.bin"));
  CHECK(valid.size() == static_cast<size_t>(std::llround(0.25 * (all.size() + valid.size()))));
  all.insert(all.end(), valid.begin(), valid.end());
  CHECK(all == joined(reference_encode(dir, files, {kText, kFirstLine}), end_of_text_id(files)));
}

TEST_CASE("tokenize_text without a vocabulary reads .jsonl documents byte by byte") {
  TempDir dir;
  write_bytes(dir.file("d.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"\\u00e9\"}\n");
  const auto run = run_command(tool() + " " + dir.file("d.jsonl") + " --out " + dir.file("o.bin"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(tokens_of(dir.file("o.bin")) == std::vector<int32_t>{'a', 'b', 0, 0xC3, 0xA9});
}

TEST_CASE("tokenize_text with a vocabulary fails clearly") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  write_inputs(dir);
  const std::string out = " --out " + dir.file("out.bin");
  const std::string bpe = " --vocab " + files.vocab + " --merges " + files.merges;
  const auto fails_with = [&](const std::string& arguments, const std::string& message) {
    const auto run = run_command(tool() + " " + arguments);
    INFO(run.output);
    CHECK(run.exit_code != 0);
    CHECK_THAT(run.output, Contains(message));
  };
  fails_with(dir.file("a.txt") + out + " --vocab " + files.vocab, "--vocab requires --merges");
  fails_with(dir.file("a.txt") + out + bpe + " --tokenizer " + files.tokenizer_json,
             "excludes --tokenizer");

  // Ids above 65535 do not fit an llm.c token file.
  nlohmann::json wide = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) wide[byte_character(static_cast<uint8_t>(byte))] = byte;
  wide["<|endoftext|>"] = 70000;
  write_bytes(dir.file("wide.json"), wide.dump());
  write_bytes(dir.file("none.txt"), "#version: 0.2\n");
  fails_with(dir.file("a.txt") + out + " --vocab " + dir.file("wide.json") + " --merges " +
                 dir.file("none.txt"),
             "the vocabulary has ids up to 70000, but llm.c token files hold uint16 tokens (ids "
             "up to 65535)");

  // Without <|endoftext|>, one document works and two cannot be separated.
  wide.erase("<|endoftext|>");
  write_bytes(dir.file("no_end.json"), wide.dump());
  const std::string no_end =
      " --vocab " + dir.file("no_end.json") + " --merges " + dir.file("none.txt");
  CHECK(run_command(tool() + " " + dir.file("a.txt") + out + no_end).exit_code == 0);
  fails_with(dir.file("a.txt") + " " + dir.file("b.jsonl") + out + no_end,
             "'" + dir.file("b.jsonl") +
                 "' line 1 is a second document, but the vocabulary has no <|endoftext|> token");

  write_bytes(dir.file("latin1.txt"), "caf\xE9 au lait");
  fails_with(dir.file("latin1.txt") + out + bpe,
             "tokenize_text: '" + dir.file("latin1.txt") + "': not valid UTF-8 at byte offset 3");
  write_bytes(dir.file("bad.jsonl"), "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n");
  fails_with(dir.file("bad.jsonl") + out + bpe,
             "'" + dir.file("bad.jsonl") + "' line 2 is not a JSON object with a string \"text\"");
  fails_with(
      dir.file("a.txt") + out + " --merges " + files.merges + " --vocab " + dir.file("absent.json"),
      "cannot open '" + dir.file("absent.json") + "'");
  std::filesystem::remove(dir.file("out.bin"));
  fails_with(dir.file("a.txt") + out + " --vocab " + files.vocab + " --merges " + dir.file("a.txt"),
             "'" + dir.file("a.txt") + "' line 1: \"It's a test: we're here.\" is not two tokens");
  CHECK_FALSE(std::filesystem::exists(dir.file("out.bin")));
}

}  // namespace
}  // namespace dslaunch::tools
