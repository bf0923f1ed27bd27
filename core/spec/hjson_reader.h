#pragma once

// Hjson (https://hjson.github.io/syntax.html), the JSON superset DeepSpeed
// reads its config with (the Python `hjson` package): comments (#, //,
// /* */), optional and trailing commas, keys and strings without quotes,
// '''multiline''' strings, and root braces that may be left out. Strict JSON
// reads exactly as nlohmann::json::parse reads it (integers stay integers,
// big ones become doubles, \uXXXX surrogate pairs are joined); only nesting
// deeper than kMaxHjsonDepth, and in read_hjson a key given twice in one
// object, are refused where nlohmann accepts. Where Hjson leaves a choice
// open, the Python package's choice is taken, since that is what DeepSpeed
// sees:
//   - a quoteless value is true, false, null or a number only when the line
//     goes on, after blanks, with nothing, a comment, ',', '}' or ']'
//     (`stage: 2 # ZeRO` is 2, `lr: 2 or 3` is the string "2 or 3"); any
//     other quoteless value is a string that runs to the end of its line,
//     commas, brackets and '#' included, with trailing blanks removed;
//   - members and elements need no comma between them, even on one line;
//   - an empty text (or only comments) is an empty object.
// Numbers are typed as nlohmann types them, not as the Python package does
// (which reads 1.0 as the integer 1). Positions count lines from 1 and
// columns from 1 in bytes, as the rest of the spec's diagnostics do.

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dslaunch::spec {

inline constexpr int kMaxHjsonDepth = 512;

// A place in the text: 1-based line and 1-based column in bytes.
struct TextPosition {
  int line = 0;
  int column = 0;
};

// Why a text is not Hjson: where reading stopped, and what was expected
// there ("expected ':' after the key \"b\", got '2'").
struct HjsonError {
  TextPosition at;
  std::string message;
};

// Receives a document's values in the order they are written, each with the
// position of its first character. Nested values arrive between their
// container's begin_ and end_ calls; in an object, each value follows its
// key. Handlers must not throw.
class HjsonHandler {
 public:
  virtual ~HjsonHandler() = default;

  // `at` is the '{', or the first key of a root written without braces.
  virtual void begin_object(TextPosition at) = 0;
  // A member's name; `at` is its first character (the quote, if quoted).
  // Every key is passed on, a repeated one too: return "" to go on, or a
  // message to stop reading with that error at `at`.
  virtual std::string key(const std::string& name, TextPosition at) = 0;
  virtual void end_object() = 0;
  virtual void begin_array(TextPosition at) = 0;
  virtual void end_array() = 0;
  // A string, number, true, false or null. `spelling` is the text the value
  // was read from: a number as written (5e8 stays "5e8", where `value` is
  // 500000000.0), a string with its quotes and escapes.
  virtual void scalar(const nlohmann::ordered_json& value, std::string_view spelling,
                      TextPosition at) = 0;
};

// Reads `text` as one Hjson document, calling `handler` for each part.
// Returns the first syntax error, or nullopt when the whole text was read.
// After an error the handler has seen an unfinished document.
std::optional<HjsonError> parse_hjson(std::string_view text, HjsonHandler& handler);

// Reads `text` as one Hjson document into a value whose objects keep their
// members in the order written. A key given twice in one object is an error
// at the second ("the key \"stage\" is given twice in this object (first at
// 3:5)"), as DeepSpeed refuses duplicate keys. On failure returns nullopt and
// sets `error`.
std::optional<nlohmann::ordered_json> read_hjson(std::string_view text, HjsonError& error);

}  // namespace dslaunch::spec
