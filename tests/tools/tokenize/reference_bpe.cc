#include "tests/tools/tokenize/reference_bpe.h"

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace dslaunch::tools::testing {
namespace {

using dslaunch::testing::run_command;
using dslaunch::testing::runfile;
using dslaunch::testing::TempDir;

std::string reference_script() {
  return "/usr/bin/python3 " + runfile("tests/tools/tokenize/gpt2_bpe_reference.py");
}

}  // namespace

ReferenceVocabulary train_reference_vocabulary(const TempDir& dir, int merge_count) {
  dslaunch::testing::write_bytes(dir.file("training.txt"), training_text());
  const auto run = run_command(fmt::format("{} train {} {} {}", reference_script(),
                                           dir.file("training.txt"), merge_count, dir.path()));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  return {dir.file("vocab.json"), dir.file("merges.txt"), dir.file("tokenizer.json"),
          dir.file("tokenizer_pairs.json")};
}

std::vector<std::vector<int32_t>> reference_encode(const TempDir& dir,
                                                   const ReferenceVocabulary& vocabulary,
                                                   const std::vector<std::string>& texts) {
  dslaunch::testing::write_bytes(dir.file("texts.json"), nlohmann::json(texts).dump());
  const auto run =
      run_command(fmt::format("{} encode {} {} {}", reference_script(), vocabulary.vocab,
                              vocabulary.merges, dir.file("texts.json")));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  auto tokens = nlohmann::json::parse(run.output).get<std::vector<std::vector<int32_t>>>();
  REQUIRE(tokens.size() == texts.size());
  return tokens;
}

std::string training_text() {
  std::string text;
  for (int i = 0; i < 8; ++i) {
    text +=
        "It's the tokenizer's test: we're here, they've gone, I'm fine, you'll see, he'd go. "
        "The quick brown fox jumps over the lazy dog; the dog sleeps.\n"
        "Café naïve résumé, 日本語のテキスト、中文字符。 😀🚀👍🏽 "
        "emoji!\n"
        "Numbers 12345, 3.14159 and 2024-05-20.\n\n"
        "    indented    code\tand\ttabs\n"
        "aaaa zzzzzz   \n";
  }
  return text;
}

std::vector<std::string> test_texts() {
  std::vector<std::string> texts = {
      training_text(),
      "Hello world! It's a test: we're here, they've gone, I'm fine, you'll see, he'd go.\n"
      "IT'S LOUD, WE'RE LOUD; 'S 'T 'Re 'VE are not contractions, 's 't 're 've 'm 'll 'd are.\n"
      "Café naïve résumé — Ünïcödé; 日本語のテキスト、中文字符。 Emoji: 😀🚀👍🏽 "
      "❤️ "
      "🇫🇷.\n"
      "Numbers: 12345 3.14159 1,000,000 2024-05-20 ٣٤٥ Ⅻ ½ ²\n"
      "Whitespace:   three spaces,\ttab,\t\ttwo tabs,\n\n\nthree newlines, trailing   \n"
      "   leading, a\u00a0no-break space,\u3000ideographic,\u2028line separator\r\n"
      "Punctuation!!! ??? ... --- (round) [square] {curly} <angle> @#$%^&*_+=|\\/~`\"quoted\"\n"
      "Mixed: don't can't won't y'all O'Neil 'quoted' rock'n'roll the dog's dogs' \n"
      "Trailing spaces:    ",
      "",
      " ",
      "   ",
      "\n",
      "\t \n  \n",
      "a",
      "'s",
      "'S",
      " 's",
      "x  ",
      "  x",
      "abc123def",
      "1 2  3   4",
      "a\u0085\u0085b",  // NEL is white space to `regex`
      "a\u180e\u180eb",  // U+180E is not (it was until Unicode 6.3)
      "😀",
      "👍🏽👍🏽",
      "aaaa aaaaaaa",
      std::string(1000, ' ') + "x",
      std::string(3000, 'a'),
  };
  return texts;
}

}  // namespace dslaunch::tools::testing
