#include "core/spec/hjson_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

// Written by hand: Debian packages no Hjson library for C++, and DeepSpeed
// configs come with comments and trailing commas as often as without. A
// recursive-descent reader is small, hands every value over with its
// position for the spec's diagnostics, and can follow the Python package
// (hjson-py, what DeepSpeed uses) wherever the Hjson syntax leaves a choice.

namespace dslaunch::spec {
namespace {

// Thrown from deep in the descent and caught at its top, so that every
// step need not check and pass on a status.
struct SyntaxError {
  size_t offset;
  std::string message;
};

constexpr std::string_view kWhitespace = " \t\r\n";  // JSON's, which Hjson keeps
constexpr std::string_view kPunctuators = "{}[],:";

bool is_one_of(char c, std::string_view set) { return set.find(c) != std::string_view::npos; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The length of the well-formed UTF-8 sequence at text[i] (RFC 3629: shortest
// form, no surrogates, nothing past U+10FFFF), or 0 if it is not one.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) -> unsigned {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
  };
  const unsigned lead = byte(0);
  if (lead < 0x80) return 1;
  // The lead byte bounds the second byte; that is where overlong forms,
  // surrogates and code points past U+10FFFF show.
  unsigned low = 0x80;
  unsigned high = 0xBF;
  size_t length = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
  }
  return length;
}

// What a one-letter escape after a backslash stands for, or '\0': JSON's
// escapes and \' (which hjson-py takes in both kinds of quotes).
char escaped_char(char letter) {
  constexpr std::string_view kLettersAndChars = "\"\"''\\\\//b\bf\fn\nr\rt\t";
  for (size_t i = 0; i < kLettersAndChars.size(); i += 2) {
    if (kLettersAndChars[i] == letter) return kLettersAndChars[i + 1];
  }
  return '\0';
}

void append_utf8(std::string& out, uint32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

// Whether `word` is a whole JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?
bool is_json_number(std::string_view word) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < word.size() && is_digit(word[i])) ++i;
    return i - start;
  };
  if (i < word.size() && word[i] == '-') ++i;
  if (i < word.size() && word[i] == '0') {
    ++i;
  } else if (digits() == 0) {
    return false;
  }
  if (i < word.size() && word[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  }
  if (i < word.size() && (word[i] == 'e' || word[i] == 'E')) {
    ++i;
    if (i < word.size() && (word[i] == '+' || word[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == word.size();
}

// A number typed as nlohmann types it: an integer that fits 64 bits stays an
// integer (unsigned unless negative), anything else is a double, read with
// strtod as nlohmann reads it. nullopt when the double overflows, which
// nlohmann refuses too.
std::optional<nlohmann::ordered_json> number_value(std::string_view spelling) {
  const char* begin = spelling.data();
  const char* end = begin + spelling.size();
  if (spelling.find_first_of(".eE") == std::string_view::npos) {
    if (spelling.front() == '-') {
      int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(begin, end, value);
      if (ec == std::errc() && ptr == end) return nlohmann::ordered_json(value);
    } else {
      uint64_t value = 0;
      const auto [ptr, ec] = std::from_chars(begin, end, value);
      if (ec == std::errc() && ptr == end) return nlohmann::ordered_json(value);
    }
  }
  const double value = std::strtod(std::string(spelling).c_str(), nullptr);
  if (!std::isfinite(value)) return std::nullopt;
  return nlohmann::ordered_json(value);
}

std::string quoted(const std::string& text) { return nlohmann::ordered_json(text).dump(); }

std::string line_and_column(TextPosition at) { return fmt::format("{}:{}", at.line, at.column); }

class Parser {
 public:
  Parser(std::string_view text, HjsonHandler& handler);

  // Reads the whole text, passing it to the handler; throws SyntaxError.
  void parse_document();

  TextPosition position_of(size_t offset) const;

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  // '\0' past the end, which no test below mistakes for a meaningful byte.
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  bool looking_at(std::string_view what) const { return text_.substr(pos_).starts_with(what); }

  // Whitespace and comments.
  void skip_blank();
  void skip_indent(size_t columns);

  void parse_value(int depth);
  void parse_members(size_t opened, bool braced, int depth);
  void parse_array(size_t opened, int depth);
  bool member_follows();
  std::string read_key();
  std::string read_quoted();
  uint32_t read_escaped_code_point(size_t escape);
  uint32_t read_hex4(size_t escape);
  std::string read_multiline();
  void read_quoteless();

  // "'x'", "end of file", "end of line": what was found where something else
  // was expected.
  std::string describe(size_t offset) const;
  [[noreturn]] void fail(size_t offset, std::string message) const;
  [[noreturn]] void fail_unclosed(size_t offset, const std::string& message) const;

  std::string_view text_;
  HjsonHandler& handler_;
  std::vector<size_t> line_starts_;  // the offset of each line's first byte
  size_t pos_ = 0;
  std::vector<size_t> open_;  // offsets of the containers being read, innermost last

  // The last quoteless string that took a '}' or ']' with it to the end of
  // its line: the likely cause when a container is then found unclosed
  // (`"enabled": tru}` reads as the string "tru}").
  struct Swallowed {
    size_t closer;  // offset of the last '}' or ']' in the string
    std::string value;
  };
  std::optional<Swallowed> swallowed_;
};

Parser::Parser(std::string_view text, HjsonHandler& handler) : text_(text), handler_(handler) {
  // A byte-order mark is not part of the text, nor counted in its columns.
  line_starts_.push_back(text_.starts_with("\xEF\xBB\xBF") ? 3 : 0);
  for (size_t i = 0; i < text_.size(); ++i) {
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
  }
}

TextPosition Parser::position_of(size_t offset) const {
  auto line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  if (line == line_starts_.begin()) return TextPosition{1, 1};  // inside the byte-order mark
  --line;
  return TextPosition{static_cast<int>(line - line_starts_.begin()) + 1,
                      static_cast<int>(offset - *line) + 1};
}

void Parser::parse_document() {
  for (size_t i = 0; i < text_.size();) {
    const size_t length = utf8_sequence_length(text_, i);
    if (length == 0) {
      fail(i, fmt::format("byte 0x{:02X} is not UTF-8 text; save the file as UTF-8",
                          static_cast<unsigned char>(text_[i])));
    }
    i += length;
  }
  pos_ = line_starts_.front();
  skip_blank();
  if (at_end()) {  // Hjson reads an empty text as an empty object
    handler_.begin_object(TextPosition{1, 1});
    handler_.end_object();
    return;
  }
  if (peek() != '{' && peek() != '[' && member_follows()) {
    parse_members(pos_, /*braced=*/false, 1);
  } else {
    parse_value(0);
  }
  skip_blank();
  if (!at_end()) {
    fail(pos_, fmt::format("expected end of file after the document, got {}", describe(pos_)));
  }
}

void Parser::skip_blank() {
  while (!at_end()) {
    if (is_one_of(peek(), kWhitespace)) {
      ++pos_;
    } else if (peek() == '#' || looking_at("//")) {
      pos_ = std::min(text_.find_first_of("\r\n", pos_), text_.size());
    } else if (looking_at("/*")) {
      // An unclosed comment runs to the end of the text, as in hjson-py.
      const size_t close = text_.find("*/", pos_ + 2);
      pos_ = close == std::string_view::npos ? text_.size() : close + 2;
    } else {
      return;
    }
  }
}

void Parser::skip_indent(size_t columns) {
  for (; columns > 0 && !at_end() && is_one_of(peek(), " \t\r"); --columns) ++pos_;
}

void Parser::parse_value(int depth) {
  const size_t start = pos_;
  const char c = peek();
  if (at_end()) fail_unclosed(start, "expected a value, got end of file");
  if (c == '{' || c == '[') {
    if (depth >= kMaxHjsonDepth) {
      fail(start, fmt::format("values are nested deeper than {} levels", kMaxHjsonDepth));
    }
    ++pos_;
    if (c == '{') {
      parse_members(start, /*braced=*/true, depth + 1);
    } else {
      parse_array(start, depth + 1);
    }
  } else if (c == '"' || c == '\'') {
    const std::string value = looking_at("'''") ? read_multiline() : read_quoted();
    handler_.scalar(value, text_.substr(start, pos_ - start), position_of(start));
  } else if (is_one_of(c, kPunctuators)) {
    const std::string message = fmt::format("expected a value, got {}", describe(start));
    if (c == '}' || c == ']') fail_unclosed(start, message);
    fail(start, message);
  } else {
    read_quoteless();
  }
}

// The members of an object: after its '{' when `braced`, else from the first
// key of a root written without braces to the end of the text.
void Parser::parse_members(size_t opened, bool braced, int depth) {
  open_.push_back(opened);
  handler_.begin_object(position_of(opened));
  skip_blank();
  while (braced ? peek() != '}' : !at_end()) {
    if (at_end()) {
      fail_unclosed(pos_, fmt::format("expected a key or '}}' to close the object opened at {}, "
                                      "got end of file",
                                      line_and_column(position_of(opened))));
    }
    const char c = peek();
    if (is_one_of(c, kPunctuators)) {
      const std::string message =
          fmt::format("expected {}, got {}", braced ? "a key or '}'" : "a key", describe(pos_));
      if (c == ']' || (c == '}' && !braced)) fail_unclosed(pos_, message);
      fail(pos_, message);
    }
    const size_t key_start = pos_;
    const std::string name = read_key();
    const size_t key_end = pos_;
    if (std::string problem = handler_.key(name, position_of(key_start)); !problem.empty()) {
      fail(key_start, std::move(problem));
    }
    skip_blank();
    if (peek() != ':') {
      std::string message =
          fmt::format("expected ':' after the key {}, got {}", quoted(name), describe(pos_));
      const bool unquoted = c != '"' && c != '\'';
      const bool same_line = text_.substr(key_end, pos_ - key_end).find('\n') == std::string::npos;
      if (unquoted && same_line && !at_end() && !is_one_of(peek(), kPunctuators)) {
        message += " (a key with blanks in it needs quotes)";
      }
      if (at_end()) fail_unclosed(pos_, message);
      fail(pos_, message);
    }
    ++pos_;
    skip_blank();
    parse_value(depth);
    skip_blank();
    if (peek() == ',') {
      ++pos_;
      skip_blank();
    }
  }
  if (braced) ++pos_;  // the '}'
  handler_.end_object();
  open_.pop_back();
}

void Parser::parse_array(size_t opened, int depth) {
  open_.push_back(opened);
  handler_.begin_array(position_of(opened));
  skip_blank();
  while (peek() != ']') {
    if (at_end()) {
      fail_unclosed(pos_, fmt::format("expected a value or ']' to close the list opened at {}, "
                                      "got end of file",
                                      line_and_column(position_of(opened))));
    }
    parse_value(depth);
    skip_blank();
    if (peek() == ',') {
      ++pos_;
      skip_blank();
    }
  }
  ++pos_;  // the ']'
  handler_.end_array();
  open_.pop_back();
}

// Whether a key and ':' come next: how a root without braces is told from a
// root that is a single value ("text", 5, a quoteless string).
bool Parser::member_follows() {
  const size_t start = pos_;
  bool member = false;
  try {
    read_key();
    skip_blank();
    member = peek() == ':';
  } catch (const SyntaxError&) {
    // Not a key, so not a member either.
  }
  pos_ = start;
  return member;
}

// A quoted key, or an unquoted one: anything up to a blank or punctuator.
std::string Parser::read_key() {
  if (looking_at("'''")) fail(pos_, "a key cannot be a '''multiline''' string");
  if (peek() == '"' || peek() == '\'') return read_quoted();
  const size_t start = pos_;
  while (!at_end() && !is_one_of(peek(), kWhitespace) && !is_one_of(peek(), kPunctuators)) ++pos_;
  if (pos_ == start) fail(pos_, fmt::format("expected a key, got {}", describe(pos_)));
  return std::string(text_.substr(start, pos_ - start));
}

// A "..." or '...' string, with the escapes of escaped_char and \uXXXX.
std::string Parser::read_quoted() {
  const size_t start = pos_;
  const char quote = text_[pos_++];
  std::string value;
  while (true) {
    if (at_end())
      fail(start, fmt::format("expected the closing {} of this string, got end of file", quote));
    const char c = text_[pos_];
    if (c == quote) {
      ++pos_;
      return value;
    }
    if (c == '\n' || c == '\r') {
      fail(pos_, fmt::format("expected the closing {} of the string that starts at {}, got end of "
                             "line (write a line break as \\n, or use a '''multiline''' string)",
                             quote, line_and_column(position_of(start))));
    }
    if (static_cast<unsigned char>(c) < 0x20) {
      fail(pos_, fmt::format("control character U+{:04X} in a string; write it as \\u{:04X}",
                             static_cast<int>(c), static_cast<int>(c)));
    }
    if (c != '\\') {
      value += c;
      ++pos_;
      continue;
    }
    const size_t escape = pos_++;
    const char letter = peek();
    ++pos_;
    if (letter == 'u') {
      append_utf8(value, read_escaped_code_point(escape));
    } else if (const char escaped = escaped_char(letter); escaped != '\0') {
      value += escaped;
    } else {
      if (at_end())
        fail(start, fmt::format("expected the closing {} of this string, got end of file", quote));
      fail(escape, fmt::format("expected an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX) "
                               "after the backslash, got {}",
                               describe(escape + 1)));
    }
  }
}

// The code point of a \uXXXX escape at `escape`, its 'u' read: a surrogate
// pair (\uD83D\uDE00) is joined, a lone half refused, as nlohmann does.
uint32_t Parser::read_escaped_code_point(size_t escape) {
  uint32_t code_point = read_hex4(escape);
  if (code_point >= 0xDC00 && code_point <= 0xDFFF) {
    fail(escape, fmt::format("\\u{:04X} is the second half of a surrogate pair, and no first half "
                             "(\\uD800 to \\uDBFF) comes before it",
                             code_point));
  }
  if (code_point >= 0xD800 && code_point <= 0xDBFF) {
    const size_t second = pos_;
    const uint32_t low = looking_at("\\u") ? (pos_ += 2, read_hex4(second)) : 0;
    if (low < 0xDC00 || low > 0xDFFF) {
      fail(second, fmt::format("expected \\uDC00 to \\uDFFF after \\u{:04X}, the first half of a "
                               "surrogate pair, got {}",
                               code_point, describe(second)));
    }
    code_point = 0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00);
  }
  return code_point;
}

uint32_t Parser::read_hex4(size_t escape) {
  const char* begin = text_.data() + pos_;
  const char* end = text_.data() + std::min(pos_ + 4, text_.size());
  uint32_t value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value, 16);
  if (ec != std::errc() || ptr != begin + 4) {
    fail(escape, "expected four hexadecimal digits after \\u");
  }
  pos_ += 4;
  return value;
}

// A '''multiline''' string: blanks and the line break after the opening '''
// are dropped, so is each later line's indentation up to the column of the
// opening ''', and so is the last line break before the closing '''. Line
// breaks read as \n whatever the file uses.
std::string Parser::read_multiline() {
  const size_t start = pos_;
  const size_t indent = position_of(start).column - 1;
  pos_ += 3;
  while (!at_end() && is_one_of(peek(), " \t\r")) ++pos_;
  if (peek() == '\n') {
    ++pos_;
    skip_indent(indent);
  }
  std::string value;
  while (!looking_at("'''")) {
    if (at_end()) fail(start, "expected the closing ''' of this string, got end of file");
    const char c = text_[pos_++];
    if (c == '\n') {
      value += c;
      skip_indent(indent);
    } else if (c != '\r') {
      value += c;
    }
  }
  pos_ += 3;
  if (!value.empty() && value.back() == '\n') value.pop_back();
  return value;
}

// A value without quotes: true, false, null or a number when nothing but
// blanks comes before the end of the line, a comment, ',', '}' or ']'; else
// a string to the end of the line, trailing blanks removed.
void Parser::read_quoteless() {
  const size_t start = pos_;
  for (size_t i = start;; ++i) {
    const bool end_of_line = i >= text_.size() || text_[i] == '\n' || text_[i] == '\r';
    const bool may_end =
        end_of_line || is_one_of(text_[i], ",}]#") ||
        (text_[i] == '/' && i + 1 < text_.size() && (text_[i + 1] == '/' || text_[i + 1] == '*'));
    if (!may_end) continue;
    std::string_view word = text_.substr(start, i - start);
    word.remove_suffix(word.size() - (word.find_last_not_of(" \t") + 1));
    std::optional<nlohmann::ordered_json> literal;
    if (word == "true" || word == "false") {
      literal = word == "true";
    } else if (word == "null") {
      literal = nullptr;
    } else if (is_json_number(word)) {
      literal = number_value(word);
      if (!literal) fail(start, fmt::format("the number {} is too large for a double", word));
    }
    if (literal || end_of_line) {
      pos_ = start + word.size();
      if (!literal) {
        if (const size_t closer = word.find_last_of("}]"); closer != std::string_view::npos) {
          swallowed_ = Swallowed{start + closer, std::string(word)};
        }
        literal = std::string(word);
      }
      handler_.scalar(*literal, word, position_of(start));
      return;
    }
  }
}

std::string Parser::describe(size_t offset) const {
  if (offset >= text_.size()) return "end of file";
  const unsigned char c = text_[offset];
  if (c == '\n' || c == '\r') return "end of line";
  if (c < 0x20 || c == 0x7F) return fmt::format("control character U+{:04X}", static_cast<int>(c));
  return fmt::format(
      "'{}'", text_.substr(offset, std::max<size_t>(1, utf8_sequence_length(text_, offset))));
}

void Parser::fail(size_t offset, std::string message) const {
  throw SyntaxError{offset, std::move(message)};
}

// Fails where a container turned out unclosed (or closed by the wrong
// bracket), but at the swallowed '}' or ']' if a quoteless string read
// inside the innermost open container took one: that is where to fix it.
void Parser::fail_unclosed(size_t offset, const std::string& message) const {
  if (swallowed_ && !open_.empty() && swallowed_->closer > open_.back()) {
    fail(swallowed_->closer,
         fmt::format("this '{}' is part of the quoteless string {}, which runs to the end of its "
                     "line; put the string in quotes (reading on: {} at {})",
                     text_[swallowed_->closer], quoted(swallowed_->value), message,
                     line_and_column(position_of(offset))));
  }
  fail(offset, message);
}

// Builds the value read_hjson returns.
class ValueBuilder : public HjsonHandler {
 public:
  nlohmann::ordered_json take() { return std::move(root_); }

  void begin_object(TextPosition) override {
    open_.push_back({nlohmann::ordered_json::object(), {}, {}});
  }
  std::string key(const std::string& name, TextPosition at) override {
    const auto [first, inserted] = open_.back().keys.try_emplace(name, at);
    if (!inserted) {
      return fmt::format("the key {} is given twice in this object (first at {})", quoted(name),
                         line_and_column(first->second));
    }
    open_.back().key = name;
    return "";
  }
  void end_object() override { close(); }
  void begin_array(TextPosition) override {
    open_.push_back({nlohmann::ordered_json::array(), {}, {}});
  }
  void end_array() override { close(); }
  void scalar(const nlohmann::ordered_json& value, std::string_view, TextPosition) override {
    add(value);
  }

 private:
  struct Open {
    nlohmann::ordered_json value;
    std::map<std::string, TextPosition> keys;  // an object's keys so far, for "first at"
    std::string key;                           // the key whose value comes next
  };

  void close() {
    nlohmann::ordered_json done = std::move(open_.back().value);
    open_.pop_back();
    add(std::move(done));
  }
  void add(nlohmann::ordered_json value) {
    if (open_.empty()) {
      root_ = std::move(value);
    } else if (open_.back().value.is_object()) {
      open_.back().value[open_.back().key] = std::move(value);
    } else {
      open_.back().value.push_back(std::move(value));
    }
  }

  std::vector<Open> open_;  // containers being filled, innermost last
  nlohmann::ordered_json root_;
};

}  // namespace

std::optional<HjsonError> parse_hjson(std::string_view text, HjsonHandler& handler) {
  Parser parser(text, handler);
  try {
    parser.parse_document();
  } catch (const SyntaxError& error) {
    return HjsonError{parser.position_of(error.offset), error.message};
  }
  return std::nullopt;
}

std::optional<nlohmann::ordered_json> read_hjson(std::string_view text, HjsonError& error) {
  ValueBuilder builder;
  if (std::optional<HjsonError> problem = parse_hjson(text, builder)) {
    error = std::move(*problem);
    return std::nullopt;
  }
  return builder.take();
}

}  // namespace dslaunch::spec
