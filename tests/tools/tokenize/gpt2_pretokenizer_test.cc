// GPT-2's pre-tokenization, piece by piece; each expected list is what
// Python's `regex` module gives for encoder.py's pattern.
#include "tools/tokenize/gpt2_pretokenizer.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace dslaunch::tools {
namespace {

using Catch::Matchers::Contains;
using Pieces = std::vector<std::string>;

Pieces pieces(std::string_view text) {
  const auto pretokenizer = Gpt2Pretokenizer::create();
  REQUIRE(pretokenizer.ok());
  Pieces found;
  const core::Status status =
      pretokenizer.value().split(text, [&](std::string_view piece) { found.emplace_back(piece); });
  INFO(status.message());
  REQUIRE(status.ok());
  return found;
}

TEST_CASE("a word keeps the space before it; punctuation and numbers are pieces of their own") {
  CHECK(pieces("Hello, world!") == Pieces{"Hello", ",", " world", "!"});
  CHECK(pieces("12345 3.14159") == Pieces{"12345", " 3", ".", "14159"});
  CHECK(pieces("Café 日本語 😀!") == Pieces{"Café", " 日本語", " 😀!"});
  CHECK(pieces("") == Pieces{});
}

TEST_CASE("contractions are lowercase: 'S is punctuation and a letter") {
  CHECK(pieces("it's they've I'm we'll he'd you're don't") ==
        Pieces{"it", "'s", " they", "'ve", " I", "'m", " we", "'ll", " he", "'d", " you", "'re",
               " don", "'t"});
  CHECK(pieces("IT'S") == Pieces{"IT", "'", "S"});
  CHECK(pieces("'S's") == Pieces{"'", "S", "'s"});
}

TEST_CASE("a run of white space leaves its last space to the word after it") {
  CHECK(pieces("a   b") == Pieces{"a", "  ", " b"});
  CHECK(pieces("a\t\tb") == Pieces{"a", "\t", "\t", "b"});
  CHECK(pieces("\n\n\nx") == Pieces{"\n\n", "\n", "x"});
  CHECK(pieces("x   \n") == Pieces{"x", "   \n"});
  CHECK(pieces("end  ") == Pieces{"end", "  "});
  CHECK(pieces("line\r\nnext") == Pieces{"line", "\r", "\n", "next"});
  CHECK(pieces(" \u3000 x") == Pieces{" \u3000", " x"});
  CHECK(pieces("a\u00A0b") == Pieces{"a", "\u00A0", "b"});
}

TEST_CASE("white space is Unicode's White_Space, as in Python's regex") {
  CHECK(pieces("a\u0085\u0085b") == Pieces{"a", "\u0085", "\u0085", "b"});
  // PCRE2's own \s takes U+180E; `regex` sees punctuation.
  CHECK(pieces("a\u180E\u180Eb") == Pieces{"a", "\u180E\u180E", "b"});
}

TEST_CASE("a run of a million spaces is one piece") {
  const std::string text = std::string(1000000, ' ') + "x";
  CHECK(pieces(text) == Pieces{std::string(999999, ' '), " x"});
}

TEST_CASE("text that is not UTF-8 fails before the first piece, naming the offset") {
  const auto pretokenizer = Gpt2Pretokenizer::create();
  REQUIRE(pretokenizer.ok());
  const auto fails_at = [&](std::string_view text, const std::string& offset) {
    int calls = 0;
    const core::Status status =
        pretokenizer.value().split(text, [&](std::string_view) { ++calls; });
    INFO(status.message());
    CHECK_FALSE(status.ok());
    CHECK_THAT(status.message(), Contains("not valid UTF-8 at byte offset " + offset));
    CHECK(calls == 0);
  };
  fails_at("abc def\xFF ghi", "7");
  fails_at("ab\xC3", "2");         // cut short
  fails_at("\xC0\xAF", "0");       // overlong '/'
  fails_at("x\xED\xA0\x80", "1");  // a UTF-16 surrogate
  fails_at("ok \x80 then", "3");   // a lone continuation byte
}

}  // namespace
}  // namespace dslaunch::tools
