#include "core/spec/hjson_reader.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace dslaunch::spec {
namespace {

using Json = nlohmann::ordered_json;

// The value with every number's type spelled out (i: signed, u: unsigned,
// f: double), so that 1 and 1.0, or a signed and an unsigned 5, differ.
std::string typed(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object: {
      std::string out = "{";
      for (const auto& [key, member] : value.items()) {
        out += Json(key).dump() + ":" + typed(member) + ",";
      }
      return out + "}";
    }
    case Json::value_t::array: {
      std::string out = "[";
      for (const Json& element : value) out += typed(element) + ",";
      return out + "]";
    }
    case Json::value_t::number_integer:
      return "i" + value.dump();
    case Json::value_t::number_unsigned:
      return "u" + value.dump();
    case Json::value_t::number_float:
      return "f" + value.dump();
    default:
      return value.dump();
  }
}

// `text` read as Hjson; fails the test if it is not.
Json read(std::string_view text) {
  HjsonError error;
  const std::optional<Json> value = read_hjson(text, error);
  INFO(text);
  INFO(error.at.line << ":" << error.at.column << ": " << error.message);
  REQUIRE(value.has_value());
  return *value;
}

// The error reading `text`; fails the test if it reads.
HjsonError error_in(std::string_view text) {
  HjsonError error;
  const std::optional<Json> value = read_hjson(text, error);
  INFO(text);
  REQUIRE_FALSE(value.has_value());
  return error;
}

std::string where(const HjsonError& error) {
  return std::to_string(error.at.line) + ":" + std::to_string(error.at.column);
}

// Records what parse_hjson hands over, one line per call.
class Recorder : public HjsonHandler {
 public:
  std::vector<std::string> calls;

  void begin_object(TextPosition at) override { calls.push_back("{ " + place(at)); }
  std::string key(const std::string& name, TextPosition at) override {
    calls.push_back("key " + name + " " + place(at));
    return "";
  }
  void end_object() override { calls.push_back("}"); }
  void begin_array(TextPosition at) override { calls.push_back("[ " + place(at)); }
  void end_array() override { calls.push_back("]"); }
  void scalar(const Json& value, std::string_view spelling, TextPosition at) override {
    calls.push_back(typed(value) + " <" + std::string(spelling) + "> " + place(at));
  }

 private:
  static std::string place(TextPosition at) {
    return std::to_string(at.line) + ":" + std::to_string(at.column);
  }
};

}  // namespace

// --- Strict JSON reads as nlohmann reads it -----------------------------------------

TEST_CASE("strict JSON reads exactly as nlohmann parses it, number types included") {
  const std::vector<std::string> corpus = {
      "{}",
      "[]",
      "[[]]",
      R"({"a":{}})",
      R"({"z": 1, "a": 2, "m": 3})",  // member order is kept
      R"({"a":[1,2,{"b":null}],"c":true,"d":false})",
      "5",
      "-1.5",
      R"("just a string")",
      "true",
      "null",
      " \t\r\n [ 1 , 2 ] \n\t ",
      "\xEF\xBB\xBF{\"bom\": 1}",
      // Integers signed and unsigned, at and past 64 bits; doubles.
      "[0, -0, 1, -1, 9223372036854775807, 9223372036854775808, -9223372036854775808, "
      "-9223372036854775809, 18446744073709551615, 18446744073709551616, "
      "123456789012345678901234567890, -123456789012345678901234567890]",
      "[1.0, -0.0, 0.5, 1e2, 1E2, 1e+2, 1e-2, 1.5E-3, 5e8, 3e-4, 0.1, 2.2250738585072014e-308, "
      "4.9e-324, 1e-400, 1.7976931348623157e308, 0e0, 1E00, 2e-00, 23456789012E66]",
      // Escapes, \u included, surrogate pairs joined, raw UTF-8 and DEL.
      R"(["\" \\ \/ \b \f \n \r \t", "\u0000", "\u00e9\u4E2D\uABCD", "\ud83d\ude00", "\u002F"])",
      "[\"h\xC3\xA9llo \xF0\x9F\x98\x80 \xE4\xB8\xAD\", \"del:\x7F\"]",
      R"({"": 0, " s p a c e d ": 1, "a:b,c{d}[e]": 2, "#": 3, "//": 4, "/*": "*/"})",
      R"({"\/\\\"\uCAFE\uBABE\b\f\n\r\t`1~!@#$%^&*()_+-=[]{}|;:',./<>?": "any key"})",
      R"({"comment": "// /* <!-- --", "quote": "'", "url": "http://www.json.org/"})",
      // Compact, and spread over lines with blanks around every token.
      R"({"compact":[1,2,3,4,5,6,7],"n":{"m":[{"k":[-1e-1]}]}})",
      "[1,2 , 3\n\n,\n\n4 , 5        ,          6           ,7        ]",
      "{\n\t\"train_batch_size\":32,\n\t\"fp16\":{\"enabled\":true,\"hysteresis\":4}\n}\n",
      "{\r\n  \"crlf\": [1,\r\n 2],\r\n  \"s\": \"x\"\r\n}\r\n",
      std::string(100, '[') + std::string(100, ']'),
  };
  for (const std::string& text : corpus) {
    INFO(text);
    const Json expected = Json::parse(text);
    const Json value = read(text);
    CHECK(typed(value) == typed(expected));
    CHECK(value == expected);
  }
}

TEST_CASE("JSON that nlohmann refuses and Hjson does not allow is refused") {
  const std::vector<std::string> corpus = {
      "[1,,2]",
      R"({"a" 1})",
      R"({"a":: 1})",
      R"({"a", 1})",
      R"(["a": 1])",
      R"(["a\x"])",
      R"(["\u12"])",
      R"(["\u12G4"])",
      R"(["\ud800"])",
      R"(["\ud800\u0041"])",
      R"(["\udc00"])",
      "[\"raw\ttab\"]",
      "[\"line\nbreak\"]",
      "[1e400]",
      "[-1e400]",
      R"({"a":1}})",
      R"({"a":1} "b")",
      "[\"unclosed",
      "[",
      "{",
      R"({"a":)",
      "[\"\xFF\"]",
      "[\"\xC0\xAF\"]",          // an overlong '/'
      "[\"\xED\xA0\x80\"]",      // a surrogate encoded in UTF-8
      "[\"\xF4\x90\x80\x80\"]",  // past U+10FFFF
      "[\"\xE4\xB8\"]",          // cut short
  };
  for (const std::string& text : corpus) {
    INFO(text);
    CHECK_THROWS(Json::parse(text));
    HjsonError error;
    CHECK_FALSE(read_hjson(text, error).has_value());
    CHECK(error.at.line >= 1);
    CHECK_FALSE(error.message.empty());
  }
}

// --- Each Hjson feature ---------------------------------------------------------------

TEST_CASE("comments of all three kinds read as blanks, wherever a blank may be") {
  const Json value = read(R"(# leading
// also leading
/* and a block
   over lines */ {
  "a" /* before the colon */ : /* after it */ 1, # after a value
  // between members
  "b": [ /* first */ 2, // after an element
         3 # last
  ], "c": "# not a comment", "d": "// nor this"
} // trailing
/* unclosed at the end, as hjson-py allows)");
  CHECK(value == Json::parse(R"({"a": 1, "b": [2, 3], "c": "# not a comment",
                                 "d": "// nor this"})"));
}

TEST_CASE("trailing commas are ignored and commas between lines may be left out") {
  CHECK(read("{\"a\": 1, \"b\": [1, 2, ], }") == Json::parse(R"({"a": 1, "b": [1, 2]})"));
  CHECK(read("{\n  a: 1\n  b: 2\n  c: [\n    3\n    4\n  ]\n}") ==
        Json::parse(R"({"a": 1, "b": 2, "c": [3, 4]})"));
  // As in hjson-py, quoted values need no comma even on one line.
  CHECK(read(R"({"a": "x" "b": "y"})") == Json::parse(R"({"a": "x", "b": "y"})"));
}

TEST_CASE("keys may go without quotes, in single quotes, and with blanks before the colon") {
  CHECK(read("{stage: 1, offload-param.x_y: 2, 'single \"q\"': 3, $weird#key/: 4, k  \n : 5}") ==
        Json::parse(R"({"stage": 1, "offload-param.x_y": 2, "single \"q\"": 3,
                        "$weird#key/": 4, "k": 5})"));
}

TEST_CASE("a quoteless string runs to the end of its line, trailing blanks trimmed") {
  const Json value = read(
      "{\n"
      "  text: look ma, no quotes!  \t\n"
      "  hash: value # is part of it\n"
      "  url: http://example.com/x\n"
      "  brackets: see [not, a, list]\n"
      "  escapes: a \\n is just \\n\n"
      "  path: /local_nvme\n"
      "  crlf: ends before the CR\r\n"
      "}");
  CHECK(value["text"] == "look ma, no quotes!");
  CHECK(value["hash"] == "value # is part of it");
  CHECK(value["url"] == "http://example.com/x");
  CHECK(value["brackets"] == "see [not, a, list]");
  CHECK(value["escapes"] == "a \\n is just \\n");
  CHECK(value["path"] == "/local_nvme");
  CHECK(value["crlf"] == "ends before the CR");
}

TEST_CASE("true, false, null and numbers without quotes are literals only when alone") {
  const Json value = read(
      "{\n"
      "  a: 5\n"
      "  b: 5 # a comment ends it\n"
      "  c: 5 // so does this\n"
      "  d: 5 /* and this */\n"
      "  e: 5, f: -1.5e3, g: 3e-4\n"
      "  h: true\n"
      "  i: null # nothing\n"
      "  j: true story\n"
      "  k: 5 times\n"
      "  l: 012\n"
      "  m: 1.\n"
      "  n: .5\n"
      "  o: - 5\n"
      "  p: 0x10\n"
      "  q: 1.0\n"
      "  r: [1, 2 ,3, true, null]\n"
      "}");
  CHECK(typed(value["a"]) == "u5");
  CHECK(typed(value["b"]) == "u5");
  CHECK(typed(value["c"]) == "u5");
  CHECK(typed(value["d"]) == "u5");
  CHECK(typed(value["e"]) == "u5");
  CHECK(typed(value["f"]) == "f-1500.0");
  CHECK(value["g"] == 3e-4);
  CHECK(value["h"] == true);
  CHECK(value["i"].is_null());
  CHECK(value["j"] == "true story");
  CHECK(value["k"] == "5 times");
  CHECK(value["l"] == "012");
  CHECK(value["m"] == "1.");
  CHECK(value["n"] == ".5");
  CHECK(value["o"] == "- 5");
  CHECK(value["p"] == "0x10");
  CHECK(typed(value["q"]) == "f1.0");  // a double, as nlohmann reads it (hjson-py says 1)
  CHECK(value["r"] == Json::parse("[1, 2, 3, true, null]"));
}

TEST_CASE("single-quoted strings take double quotes as they are") {
  CHECK(read(R"(['say "hi"', 'it\'s', "it's", 'tab\t'])") ==
        Json::parse(R"(["say \"hi\"", "it's", "it's", "tab\t"])"));
}

TEST_CASE("a multiline string loses its first line break, indentation and last line break") {
  const Json value = read(
      "{\n"
      "  haiku:\n"
      "    '''\n"
      "    JSON I love you.\n"
      "      But you strangle my expression.\n"
      "    This is so much better.\n"
      "    '''\n"
      "  inline: '''first line\n"
      "    second's 'quoted' '' part'''\n"
      "  crlf: '''\r\n    a\r\n    b\r\n    '''\n"
      "}");
  CHECK(value["haiku"] ==
        "JSON I love you.\n  But you strangle my expression.\nThis is so much better.");
  CHECK(value["inline"] == "first line\nsecond's 'quoted' '' part");
  CHECK(value["crlf"] == "a\nb");
}

TEST_CASE("the root braces may be left out, and an empty text is an empty object") {
  CHECK(read("# a root without braces\nname: demo\nsize: 2\nlist: [1, 2]\n") ==
        Json::parse(R"({"name": "demo", "size": 2, "list": [1, 2]})"));
  CHECK(read("a: 1, b: {c: 2}") == Json::parse(R"({"a": 1, "b": {"c": 2}})"));
  CHECK(read("") == Json::object());
  CHECK(read("  # only a comment\n/* and another */\n") == Json::object());
  // A root that is no key and ':' is a single value.
  CHECK(read("allow quoteless strings") == "allow quoteless strings");
  CHECK(read("'''multi\nline'''") == "multi\nline");
}

TEST_CASE("a DeepSpeed config with comments and trailing commas reads as its JSON") {
  const Json value = read(R"(// ZeRO-2 with fp16, as in DeepSpeed's tutorials.
{
  # 4 GPUs x 8 x 1 accumulation step
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 1.0,
  /* fp16 with a dynamic loss scale */
  "fp16": {
    "enabled": true,
    "loss_scale": 0, // dynamic
    "initial_scale_power": 16,
  },
  "zero_optimization": {
    stage: 2
    reduce_bucket_size: 5e8
    offload_optimizer: {device: "cpu", pin_memory: true}
  },
  "optimizer": {
    "type": "AdamW",
    "params": {"lr": 3e-4, "betas": [0.9, 0.999,], "weight_decay": 0.01,},
  },
  "scheduler": {type: "WarmupLR", params: {warmup_num_steps: 500}},
})");
  CHECK(typed(value) == typed(Json::parse(R"({
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 1.0,
  "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8,
                        "offload_optimizer": {"device": "cpu", "pin_memory": true}},
  "optimizer": {"type": "AdamW",
                "params": {"lr": 3e-4, "betas": [0.9, 0.999], "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 500}}
})")));
}

// --- What the handler is given ----------------------------------------------------------

TEST_CASE("the handler gets each value with its position and spelling, in order") {
  Recorder recorder;
  REQUIRE_FALSE(
      parse_hjson("{\n  \"lr\": 3e-4,\n  stage: 2 # ZeRO\n  \"s\": \"a\\tb\",\n"
                  "  list: [5E8, null]\n  stage: 3\n}",
                  recorder));
  CHECK(recorder.calls == std::vector<std::string>{
                              "{ 1:1",
                              "key lr 2:3",
                              "f0.0003 <3e-4> 2:9",
                              "key stage 3:3",
                              "u2 <2> 3:10",
                              "key s 4:3",
                              R"("a\tb" <"a\tb"> 4:8)",
                              "key list 5:3",
                              "[ 5:9",
                              "f500000000.0 <5E8> 5:10",
                              "null <null> 5:15",
                              "]",
                              // A repeated key is the handler's to judge.
                              "key stage 6:3",
                              "u3 <3> 6:10",
                              "}",
                          });
}

TEST_CASE("a root without braces begins at its first key") {
  Recorder recorder;
  REQUIRE_FALSE(parse_hjson("// comment\n\n  a: x\n", recorder));
  CHECK(recorder.calls == std::vector<std::string>{"{ 3:3", "key a 3:3", R"("x" <x> 3:6)", "}"});
}

TEST_CASE("a handler's objection to a key stops reading with its message at the key") {
  class Refuser : public Recorder {
    std::string key(const std::string& name, TextPosition) override {
      return name == "bad" ? "no 'bad' here" : "";
    }
  } refuser;
  const std::optional<HjsonError> error = parse_hjson("{ok: 1,\n  bad: 2}", refuser);
  REQUIRE(error.has_value());
  CHECK(error->message == "no 'bad' here");
  CHECK(error->at.line == 2);
  CHECK(error->at.column == 3);
}

// --- Errors: where, and what was expected ---------------------------------------------------

TEST_CASE("a key given twice in one object is refused at the second, naming the first") {
  const HjsonError error = error_in("{\n  stage: 1,\n  \"stage\": 2\n}");
  CHECK(where(error) == "3:3");
  CHECK(error.message == "the key \"stage\" is given twice in this object (first at 2:3)");
  // The same key in different objects is no repetition.
  CHECK(read(R"({"a": {"x": 1}, "b": {"x": 2}, "x": 3})")["b"]["x"] == 2);
  CHECK(where(error_in("{a: {b: 1, b: 2}}")) == "1:12");
}

TEST_CASE("syntax errors name their line and column and what was expected there") {
  struct Case {
    std::string text;
    std::string where;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{\n  \"stage\": 1,\n  \"b\" 2\n}\n", "3:7", "expected ':' after the key \"b\", got '2'"},
      {"{\"train_batch_size\": 8", "1:23",
       "expected a key or '}' to close the object opened at 1:1, got end of file"},
      {"[1, 2", "1:6", "expected a value or ']' to close the list opened at 1:1, got end of file"},
      {"{\n  wrong name: 0\n}", "2:9",
       "expected ':' after the key \"wrong\", got 'n' (a key with blanks in it needs quotes)"},
      {"{\n  noDelimiter\n  {\n  }\n}", "3:3",
       "expected ':' after the key \"noDelimiter\", got '{'"},
      {"{\n  ql: ]\n}", "2:7", "expected a value, got ']'"},
      {"{a: 1,, b: 2}", "1:7", "expected a key or '}', got ','"},
      {"[\n  ,\n]", "2:3", "expected a value, got ','"},
      {"{\n  : 0\n}", "2:3", "expected a key or '}', got ':'"},
      {"{\"a\": 1} x", "1:10", "expected end of file after the document, got 'x'"},
      {"[\"a\"]]", "1:6", "expected end of file after the document, got ']'"},
      {"{\n  s: \"abc", "2:6", "expected the closing \" of this string, got end of file"},
      {"{\n  s: \"abc\n}", "2:10",
       "expected the closing \" of the string that starts at 2:6, got end of line (write a line "
       "break as \\n, or use a '''multiline''' string)"},
      {"{s: \"a\\qb\"}", "1:7",
       "expected an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX) after the backslash, got "
       "'q'"},
      {"[\"\\u00G0\"]", "1:3", "expected four hexadecimal digits after \\u"},
      {"[\"\\udc00\"]", "1:3",
       "\\uDC00 is the second half of a surrogate pair, and no first half (\\uD800 to \\uDBFF) "
       "comes before it"},
      {"[\"\\ud83dx\"]", "1:9",
       "expected \\uDC00 to \\uDFFF after \\uD83D, the first half of a surrogate pair, got 'x'"},
      {"[\"a\x01\"]", "1:4", "control character U+0001 in a string; write it as \\u0001"},
      {"{\n  ml: '''\n  never closed\n", "2:7",
       "expected the closing ''' of this string, got end of file"},
      {"{'''key''': 1}", "1:2", "a key cannot be a '''multiline''' string"},
      {"{\n  big: 1e999\n}", "2:8", "the number 1e999 is too large for a double"},
      {"{\n  a: \"caf\xE9\"\n}", "2:10", "byte 0xE9 is not UTF-8 text; save the file as UTF-8"},
      {"\xEF\xBB\xBF{a: }", "1:5", "expected a value, got '}'"},  // the BOM takes no column
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const HjsonError error = error_in(c.text);
    CHECK(where(error) == c.where);
    CHECK(error.message == c.message);
  }
}

TEST_CASE("a '}' or ']' taken by a quoteless string is where an unclosed container is reported") {
  // "tru}" is a string that runs to the end of its line, so the '}' on the
  // next line closes "fp16" and the root is left open.
  const HjsonError unclosed =
      error_in("{\n  \"train_batch_size\": 32,\n  \"fp16\": {\"enabled\": tru}\n}\n");
  CHECK(where(unclosed) == "3:26");
  CHECK(unclosed.message ==
        "this '}' is part of the quoteless string \"tru}\", which runs to the end of its line; "
        "put the string in quotes (reading on: expected a key or '}' to close the object opened "
        "at 1:1, got end of file at 5:1)");
  // A list of quoteless strings on one line is one string, ']' included.
  const HjsonError list = error_in("{\n  a: [x, y]\n}");
  CHECK(where(list) == "2:11");
  CHECK(list.message.find("the quoteless string \"x, y]\"") != std::string::npos);
  CHECK(list.message.find("expected a value, got '}' at 3:1") != std::string::npos);
  // Other errors stay where they are found.
  const HjsonError other = error_in("{\n  a: {text: see [1]}\n  }\n  b c: 1\n}");
  CHECK(where(other) == "4:5");
}

TEST_CASE("nesting deeper than kMaxHjsonDepth is refused where it goes too deep") {
  CHECK_NOTHROW(read(std::string(kMaxHjsonDepth, '[') + std::string(kMaxHjsonDepth, ']')));
  const std::string deep(kMaxHjsonDepth + 1, '[');
  const HjsonError error = error_in(deep + std::string(kMaxHjsonDepth + 1, ']'));
  CHECK(where(error) == "1:" + std::to_string(kMaxHjsonDepth + 1));
  CHECK(error.message == "values are nested deeper than 512 levels");
}

}  // namespace dslaunch::spec
