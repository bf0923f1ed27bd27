#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::topology {

// Small text helpers shared by the hostfile, filter and Slurm parsers.

// `text` in double quotes, for error messages.
std::string quoted(std::string_view text);

// The parts of `text` between `separator`s, empty parts included ("a@@b"
// gives "a", "", "b"). Views into `text`.
std::vector<std::string_view> split(std::string_view text, char separator);

// The whole of `text` as a decimal integer: false for an empty text, a sign
// an unsigned type does not take, trailing characters or overflow.
template <typename Integer>
bool parse_whole_number(std::string_view text, Integer& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

}  // namespace dslaunch::topology
