#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::topology {

// Small text helpers shared by the hostfile, filter and Slurm parsers. All are
// pure and never throw (beyond allocation).

// `text` in double quotes, for error messages. Bytes that would not print as
// themselves (control characters, DEL, anything outside ASCII) are written as
// `\xNN`, and `"` and `\` are escaped, so a message stays one line of valid
// text whatever the input held.
std::string quoted(std::string_view text);

// The parts of `text` between `separator`s, empty parts included ("a@@b"
// gives "a", "", "b"). Views into `text`.
std::vector<std::string_view> split(std::string_view text, char separator);

// The blanks that separate the fields of a line: space and tab.
inline constexpr std::string_view kBlanks = " \t";

// `text` without its leading and trailing blanks; empty when all blank. A view
// into `text`.
std::string_view trim_blanks(std::string_view text);

// The runs of non-blanks in `text`, in order ("  a\tb  c" gives "a", "b",
// "c"); none for an empty or all-blank text. Views into `text`.
std::vector<std::string_view> split_blanks(std::string_view text);

// The whole of `text` as a decimal integer: false for an empty text, a sign
// an unsigned type does not take, trailing characters or overflow.
template <typename Integer>
bool parse_whole_number(std::string_view text, Integer& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

}  // namespace dslaunch::topology
