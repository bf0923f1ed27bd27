#include "core/shell_words.h"

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

std::vector<std::string> split(const std::string& text) {
  std::string error;
  std::optional<std::vector<std::string>> words = split_shell_words(text, error);
  INFO(error);
  REQUIRE(words);
  return *words;
}

TEST_CASE("launcher arguments split as Python's shlex.split splits them, expanding nothing") {
  using Words = std::vector<std::string>;
  CHECK(split("") == Words{});
  CHECK(split("  \t ") == Words{});
  CHECK(split("--mca btl tcp,self  -x\tFOO") == Words{"--mca", "btl", "tcp,self", "-x", "FOO"});
  CHECK(split("--mca plm_rsh_agent 'ssh -F /etc/my config'") ==
        Words{"--mca", "plm_rsh_agent", "ssh -F /etc/my config"});
  CHECK(split(R"(a"b c"d)") == Words{"ab cd"});
  CHECK(split(R"("say \"hi\" \$HOME \n")") == Words{R"(say "hi" $HOME \n)"});
  CHECK(split(R"(a\ b c\'d)") == Words{"a b", "c'd"});
  CHECK(split("'' \"\"") == Words{"", ""});
  CHECK(split("$HOME *.txt ~") == Words{"$HOME", "*.txt", "~"});
  CHECK(split(R"('it''s')") == Words{"its"});
}

TEST_CASE("unterminated quotes and a trailing backslash are refused with where they are") {
  std::string error;
  CHECK_FALSE(split_shell_words("--a 'open", error));
  CHECK(error == "a single quote at character 5 is never closed");
  CHECK_FALSE(split_shell_words(R"(x "open \")", error));
  CHECK(error == "a double quote at character 3 is never closed");
  CHECK_FALSE(split_shell_words("x \\", error));
  CHECK(error == "it ends with a backslash that escapes nothing");
}

}  // namespace
}  // namespace dslaunch::core
