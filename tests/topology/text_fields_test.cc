#include "topology/text_fields.h"

#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

using dslaunch::topology::parse_whole_number;
using dslaunch::topology::quoted;
using dslaunch::topology::split;
using dslaunch::topology::split_blanks;
using dslaunch::topology::trim_blanks;

namespace {

using Parts = std::vector<std::string_view>;

}  // namespace

TEST_CASE("trim_blanks removes the spaces and tabs around a text and nothing else") {
  CHECK(trim_blanks("  a b\t") == "a b");
  CHECK(trim_blanks("\t\tworker-0 slots=4 ") == "worker-0 slots=4");
  CHECK(trim_blanks("a") == "a");
  CHECK(trim_blanks(" \t \t") == "");
  CHECK(trim_blanks("") == "");
  CHECK(trim_blanks("\na\r") == "\na\r");  // line ends are the caller's to remove
}

TEST_CASE("split_blanks returns the runs between spaces and tabs, without empty ones") {
  CHECK(split_blanks("  a\tb  c ") == Parts{"a", "b", "c"});
  CHECK(split_blanks("worker-0 slots=4") == Parts{"worker-0", "slots=4"});
  CHECK(split_blanks("one") == Parts{"one"});
  CHECK(split_blanks(" \t ").empty());
  CHECK(split_blanks("").empty());
}

TEST_CASE("split keeps empty parts between separators") {
  CHECK(split("a@@b", '@') == Parts{"a", "", "b"});
  CHECK(split("", ',') == Parts{""});
  CHECK(split("0,1,", ',') == Parts{"0", "1", ""});
}

TEST_CASE("quoted escapes quotes, backslashes and bytes that are not printable ASCII") {
  CHECK(quoted("worker-0:0,1") == R"("worker-0:0,1")");
  CHECK(quoted("") == R"("")");
  CHECK(quoted(R"(say "hi" \ bye)") == R"("say \"hi\" \\ bye")");
  CHECK(quoted("tab\there") == R"("tab\x09here")");
  CHECK(quoted("n\xc3\xb6"
               "de\x7f\x01") == R"("n\xc3\xb6de\x7f\x01")");
  CHECK(quoted(std::string_view("a\0b", 3)) == R"("a\x00b")");
}

TEST_CASE("parse_whole_number takes the whole text as a decimal integer or fails") {
  int value = -1;
  CHECK(parse_whole_number("65536", value));
  CHECK(value == 65536);
  for (const char* text : {"", "+1", "1x", " 1", "1.5", "99999999999"}) {
    INFO(text);
    CHECK_FALSE(parse_whole_number(text, value));
  }
  unsigned long long big = 0;
  CHECK_FALSE(parse_whole_number("-1", big));
}
