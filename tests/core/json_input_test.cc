#include "core/json_input.h"

#include <string>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

TEST_CASE("untrusted JSON parses up to the depth cap and not past it") {
  std::string error;
  const std::string at_cap = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  const auto parsed = parse_untrusted_json(at_cap, error);
  REQUIRE(parsed);
  CHECK(parsed->dump() == at_cap);

  const std::string past_cap = "[" + at_cap + "]";
  CHECK_FALSE(parse_untrusted_json(past_cap, error));
  CHECK(error == "arrays and objects nest deeper than 64 levels");

  // Deep enough to overflow the stack of a recursive dump or copy.
  const std::string hostile = "{\"a\":" + std::string(1000000, '[');
  CHECK_FALSE(parse_untrusted_json(hostile, error));
  CHECK(error == "arrays and objects nest deeper than 64 levels");
}

TEST_CASE("untrusted JSON with a syntax error says where") {
  std::string error;
  CHECK_FALSE(parse_untrusted_json("{\"a\": tru}", error));
  CHECK_THAT(error, Catch::Contains("parse error at line 1, column"));
  CHECK_FALSE(parse_untrusted_json("", error));
  CHECK_FALSE(parse_untrusted_json("\"\xff\"", error));
}

TEST_CASE("a JSON excerpt for a message is short and escaped") {
  CHECK(json_excerpt(nlohmann::json::array({1, 2})) == "[1,2]");
  CHECK(json_excerpt(nlohmann::json(std::string(1000, 'x'))).size() == 203);
  CHECK(json_excerpt(nlohmann::json("\x1b[2J")) == "\"\\u001b[2J\"");
  CHECK(json_excerpt(nlohmann::json("\xff")) == "\"\xef\xbf\xbd\"");
}

}  // namespace
}  // namespace dslaunch::core
