#include "core/spec/terminal_text.h"

#include <catch2/catch.hpp>

namespace dslaunch::spec {

TEST_CASE("control characters are written as escapes, not sent to the terminal") {
  CHECK(terminal_safe("\x1b]0;owned\x07 title") == "\\x1b]0;owned\\x07 title");
  CHECK(terminal_safe("\x1b[2J") == "\\x1b[2J");
  CHECK(terminal_safe("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(terminal_safe(std::string_view("nul\0end", 7)) == "nul\\x00end");
  CHECK(terminal_safe("del\x7f") == "del\\x7f");
}

TEST_CASE("printable UTF-8 is kept; C1 controls, bidi overrides and broken UTF-8 are escaped") {
  CHECK(terminal_safe("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80") ==
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80");
  CHECK(terminal_safe("\xc2\x9b"
                      "2J") == "\\u009b2J");             // CSI as one code point
  CHECK(terminal_safe("\xe2\x80\xae"
                      "cba") == "\\u202ecba");           // right-to-left override
  CHECK(terminal_safe("\xff\xc3") == "\\xff\\xc3");      // invalid, truncated
  CHECK(terminal_safe("\xc0\xaf") == "\\xc0\\xaf");      // overlong '/'
  CHECK(terminal_safe("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
}

TEST_CASE("plain text is unchanged") {
  CHECK(terminal_safe("unknown key 'trian_batch_size' in training") ==
        "unknown key 'trian_batch_size' in training");
  CHECK(terminal_safe("").empty());
}

}  // namespace dslaunch::spec
