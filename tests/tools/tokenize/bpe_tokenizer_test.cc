// The BPE tokenizer against OpenAI's encoder.py (gpt2_bpe_reference.py) on
// vocabularies trained in the test, and the loaders' errors.
#include "tools/tokenize/bpe_tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "tests/support/temp_files.h"
#include "tests/tools/tokenize/reference_bpe.h"
#include "tools/tokenize/byte_alphabet.h"

namespace dslaunch::tools {
namespace {

using Catch::Matchers::Contains;
using dslaunch::testing::TempDir;
using dslaunch::testing::write_bytes;
using testing::reference_encode;
using testing::test_texts;
using testing::train_reference_vocabulary;

constexpr int kMerges = 400;

BpeTokenizer loaded(core::StatusOr<BpeTokenizer> tokenizer) {
  INFO(tokenizer.status().message());
  REQUIRE(tokenizer.ok());
  return std::move(*tokenizer);
}

std::vector<int32_t> encoded(BpeTokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> tokens;
  const core::Status status = tokenizer.encode(text, tokens);
  INFO(status.message());
  REQUIRE(status.ok());
  return tokens;
}

std::string describe(const std::string& text) {
  return core::json_excerpt(nlohmann::json(text), 120);
}

// vocab.json text: the 256 byte tokens with ids 0 to 255 in byte order, then
// `extra` tokens with the next ids.
std::string byte_vocab(const std::vector<std::string>& extra = {}) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) vocab[byte_character(static_cast<uint8_t>(byte))] = byte;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + i;
  return vocab.dump();
}

TEST_CASE("BPE encodes as OpenAI's encoder.py does") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  BpeTokenizer tokenizer = loaded(BpeTokenizer::from_vocab_and_merges(files.vocab, files.merges));
  const std::vector<std::string> texts = test_texts();
  const auto expected = reference_encode(dir, files, texts);
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO("text " << i << ": " << describe(texts[i]));
    CHECK(encoded(tokenizer, texts[i]) == expected[i]);
    // Again, now from the cache of pieces.
    CHECK(encoded(tokenizer, texts[i]) == expected[i]);
  }
  // The merges did their work: the training text takes far fewer tokens than bytes.
  CHECK(expected[0].size() * 3 < texts[0].size());
}

TEST_CASE("decode gives back the bytes that encode took") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  BpeTokenizer tokenizer = loaded(BpeTokenizer::from_vocab_and_merges(files.vocab, files.merges));
  std::vector<std::string> texts = test_texts();
  texts.push_back(std::string(200000, ' ') + "x" + std::string(200000, 'a'));
  for (const std::string& text : texts) {
    INFO(describe(text));
    const auto decoded = tokenizer.decode(encoded(tokenizer, text));
    REQUIRE(decoded.ok());
    CHECK(decoded.value() == text);
  }
  REQUIRE(tokenizer.end_of_text().has_value());
  const int32_t end_of_text = *tokenizer.end_of_text();
  CHECK(end_of_text == tokenizer.vocab_size() - 1);  // the trainer puts it last
  CHECK(tokenizer.decode(std::vector<int32_t>{end_of_text}).value() == "<|endoftext|>");

  const int32_t beyond = static_cast<int32_t>(tokenizer.vocab_size());
  const auto unknown = tokenizer.decode(std::vector<int32_t>{end_of_text, beyond});
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.status().message(), Contains("token " + std::to_string(beyond) +
                                                  " (at position 1) is not in the "
                                                  "vocabulary"));
  CHECK_FALSE(tokenizer.decode(std::vector<int32_t>{-1}).ok());
}

TEST_CASE("text that spells <|endoftext|> is ordinary text") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  BpeTokenizer tokenizer = loaded(BpeTokenizer::from_vocab_and_merges(files.vocab, files.merges));
  const std::vector<int32_t> tokens = encoded(tokenizer, "a<|endoftext|>b");
  CHECK(tokens == reference_encode(dir, files, {"a<|endoftext|>b"})[0]);
  CHECK(std::find(tokens.begin(), tokens.end(), *tokenizer.end_of_text()) == tokens.end());
}

TEST_CASE("tokenizer.json, with merges as strings or as pairs, is vocab.json with merges.txt") {
  TempDir dir;
  const auto files = train_reference_vocabulary(dir, kMerges);
  BpeTokenizer from_pair = loaded(BpeTokenizer::from_vocab_and_merges(files.vocab, files.merges));
  BpeTokenizer from_strings = loaded(BpeTokenizer::from_tokenizer_json(files.tokenizer_json));
  BpeTokenizer from_pairs = loaded(BpeTokenizer::from_tokenizer_json(files.tokenizer_pairs_json));
  for (BpeTokenizer* tokenizer : {&from_strings, &from_pairs}) {
    CHECK(tokenizer->vocab_size() == from_pair.vocab_size());
    CHECK(tokenizer->end_of_text() == from_pair.end_of_text());
    for (const std::string& text : test_texts()) {
      INFO(describe(text));
      CHECK(encoded(*tokenizer, text) == encoded(from_pair, text));
    }
  }
}

TEST_CASE("a pair that a merge creates waits for the next round, as in encoder.py") {
  // "aa a" ranks above "a a", so Hugging Face's heap of single merges would
  // turn "aaaa" into "aaa" "a"; encoder.py merges every "a a" first.
  TempDir dir;
  write_bytes(dir.file("vocab.json"), byte_vocab({"aa", "aaa"}));
  write_bytes(dir.file("merges.txt"), "#version: 0.2\naa a\na a\n");
  BpeTokenizer tokenizer =
      loaded(BpeTokenizer::from_vocab_and_merges(dir.file("vocab.json"), dir.file("merges.txt")));
  const int32_t a = 'a', aa = 256, aaa = 257;
  CHECK(encoded(tokenizer, "aaa") == std::vector<int32_t>{aaa});
  CHECK(encoded(tokenizer, "aaaa") == std::vector<int32_t>{aa, aa});
  CHECK(encoded(tokenizer, "aaaaa") == std::vector<int32_t>{aa, aaa});
  CHECK(encoded(tokenizer, "aaaaaa") == std::vector<int32_t>{aa, aa, aa});
  CHECK(encoded(tokenizer, "ab") == std::vector<int32_t>{a, 'b'});
  const testing::ReferenceVocabulary files{dir.file("vocab.json"), dir.file("merges.txt"), "", ""};
  CHECK(reference_encode(dir, files, {"aaa", "aaaa", "aaaaa", "aaaaaa", "ab"}) ==
        std::vector<std::vector<int32_t>>{{aaa}, {aa, aa}, {aa, aaa}, {aa, aa, aa}, {a, 'b'}});
  CHECK_FALSE(tokenizer.end_of_text().has_value());
}

TEST_CASE("text that is not UTF-8 is refused with its byte offset, and nothing is appended") {
  TempDir dir;
  write_bytes(dir.file("vocab.json"), byte_vocab());
  write_bytes(dir.file("merges.txt"), "");
  BpeTokenizer tokenizer =
      loaded(BpeTokenizer::from_vocab_and_merges(dir.file("vocab.json"), dir.file("merges.txt")));
  std::vector<int32_t> tokens = {7};
  const core::Status status = tokenizer.encode("caf\xc3 ok", tokens);
  CHECK_FALSE(status.ok());
  CHECK_THAT(status.message(), Contains("not valid UTF-8 at byte offset 3"));
  CHECK(tokens == std::vector<int32_t>{7});
}

TEST_CASE("loading fails with the file, and the line or entry, that is wrong") {
  TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    write_bytes(dir.file(name), text);
    return dir.file(name);
  };
  const std::string vocab = write("vocab.json", byte_vocab({"ab", "<|endoftext|>"}));
  const std::string merges = write("merges.txt", "#version: 0.2\na b\n");
  const auto fails_with = [](const auto& loaded, const std::string& message) {
    INFO(message);
    REQUIRE_FALSE(loaded.ok());
    CHECK_THAT(loaded.status().message(), Contains(message));
  };
  REQUIRE(BpeTokenizer::from_vocab_and_merges(vocab, merges).ok());

  fails_with(BpeTokenizer::from_vocab_and_merges(dir.file("absent.json"), merges),
             "cannot open '" + dir.file("absent.json") + "': No such file or directory");
  fails_with(BpeTokenizer::from_vocab_and_merges(vocab, dir.file("absent.txt")),
             "cannot open '" + dir.file("absent.txt") + "'");
  fails_with(BpeTokenizer::from_vocab_and_merges(write("broken.json", "{\"a\": 1"), merges),
             "'" + dir.file("broken.json") + "' is not JSON");
  fails_with(BpeTokenizer::from_vocab_and_merges(write("list.json", "[1, 2]"), merges),
             "is not a JSON object of token ids");
  fails_with(BpeTokenizer::from_vocab_and_merges(write("text_id.json", R"({"a": "one"})"), merges),
             R"(token "a" has id "one"; ids are integers from 0 to)");
  fails_with(BpeTokenizer::from_vocab_and_merges(write("negative.json", R"({"a": -1})"), merges),
             R"(token "a" has id -1)");
  fails_with(BpeTokenizer::from_vocab_and_merges(write("same.json", R"({"a": 1, "b": 1})"), merges),
             R"(tokens "a" and "b" both have id 1)");
  nlohmann::json no_newline = nlohmann::json::parse(byte_vocab());
  no_newline.erase(byte_character('\n'));
  fails_with(
      BpeTokenizer::from_vocab_and_merges(write("no_newline.json", no_newline.dump()), merges),
      "'" + dir.file("no_newline.json") + "' has no token for byte 0x0A (\"Ċ\")");

  fails_with(
      BpeTokenizer::from_vocab_and_merges(vocab, write("three.txt", "#version: 0.2\na b\na b c\n")),
      "'" + dir.file("three.txt") + "' line 3: \"a b c\" is not two tokens separated by one space");
  fails_with(BpeTokenizer::from_vocab_and_merges(vocab, write("one.txt", "ab\n")),
             "'" + dir.file("one.txt") + "' line 1: \"ab\" is not two tokens");
  fails_with(BpeTokenizer::from_vocab_and_merges(vocab, write("double_space.txt", "a  b\n")),
             "line 1: \"a  b\" is not two tokens");
  fails_with(BpeTokenizer::from_vocab_and_merges(vocab, write("unknown.txt", "a b\nab c\n")),
             "'" + dir.file("unknown.txt") +
                 "' line 2: merge \"ab\" \"c\": \"abc\" is not in the vocabulary");
}

TEST_CASE("tokenizer.json that is not GPT-2's byte-level BPE is refused, naming the field") {
  TempDir dir;
  const nlohmann::json vocab = nlohmann::json::parse(byte_vocab({"ab"}));
  const nlohmann::json good = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({"a b"})}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
  };
  const auto load = [&](const nlohmann::json& tokenizer) {
    write_bytes(dir.file("tokenizer.json"), tokenizer.dump());
    return BpeTokenizer::from_tokenizer_json(dir.file("tokenizer.json"));
  };
  const auto fails_with = [&](const nlohmann::json& tokenizer, const std::string& message) {
    const auto loaded = load(tokenizer);
    INFO(message);
    REQUIRE_FALSE(loaded.ok());
    CHECK_THAT(loaded.status().message(), Contains(message));
  };
  REQUIRE(load(good).ok());
  const std::string file = "'" + dir.file("tokenizer.json") + "'";

  fails_with(nlohmann::json::object(), file + " has no \"model\" object");
  nlohmann::json changed = good;
  changed["model"]["type"] = "WordPiece";
  fails_with(changed, file + " holds a \"WordPiece\" model");
  changed = good;
  changed["model"].erase("merges");
  fails_with(changed, file + " model.merges is missing or not an array");
  changed = good;
  changed["model"]["merges"] = nlohmann::json::array({"a b", 5});
  fails_with(changed, file + " model.merges[1]: 5 is neither \"left right\" nor [left, right]");
  changed["model"]["merges"] = nlohmann::json::array(
      {nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"})});
  fails_with(changed,
             file + " model.merges[1]: merge \"ab\" \"c\": \"abc\" is not in the vocabulary");
  changed = good;
  changed["model"]["vocab"]["x"] = 1;
  fails_with(changed, file + " model.vocab: tokens");
  changed = good;
  changed["normalizer"] = {{"type", "NFC"}};
  fails_with(changed, file + " has a normalizer ({\"type\":\"NFC\"})");
  changed = good;
  changed["pre_tokenizer"] = {{"type", "Whitespace"}};
  fails_with(changed, file + " has the pre-tokenizer {\"type\":\"Whitespace\"}");
  changed["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  fails_with(changed, "only GPT-2's (ByteLevel, without add_prefix_space, with use_regex)");
  changed = good;
  changed["added_tokens"] = nlohmann::json::array(
      {nlohmann::json{{"id", 300}, {"content", "<|endoftext|>"}}, nlohmann::json{{"id", 301}}});
  fails_with(changed, file + " added_tokens[1] is not an object with \"content\" and \"id\"");
  changed["added_tokens"] =
      nlohmann::json::array({nlohmann::json{{"id", 65}, {"content", "<|endoftext|>"}}});
  fails_with(changed,
             file + " added_tokens[0]: tokens \"A\" and \"<|endoftext|>\" both have id 65");

  // Special tokens may lie outside model.vocab.
  changed["added_tokens"] =
      nlohmann::json::array({nlohmann::json{{"id", 300}, {"content", "<|endoftext|>"}}});
  BpeTokenizer with_special = loaded(load(changed));
  CHECK(with_special.end_of_text() == 300);
  CHECK(with_special.vocab_size() == 301);
}

}  // namespace
}  // namespace dslaunch::tools
