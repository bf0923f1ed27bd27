#include "topology/hostfile.h"

#include "topology/text_fields.h"

#include <unordered_map>

namespace dslaunch::topology {
namespace {

constexpr std::string_view kBlanks = " \t";
constexpr std::string_view kSlotsKey = "slots=";
constexpr std::string_view kExpected = R"(expected "hostname slots=N")";

std::string_view trim_blanks(std::string_view text) {
  const size_t first = text.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kBlanks) - first + 1);
}

std::vector<std::string_view> split_blanks(std::string_view text) {
  std::vector<std::string_view> tokens;
  size_t start = text.find_first_not_of(kBlanks);
  while (start != std::string_view::npos) {
    const size_t end = text.find_first_of(kBlanks, start);
    tokens.push_back(text.substr(start, end - start));
    start = text.find_first_not_of(kBlanks, end);
  }
  return tokens;
}

struct ParsedLine {
  std::string_view host;
  int slots = 0;
  std::string error;  // empty when host and slots are set
};

ParsedLine malformed(std::string message) {
  ParsedLine parsed;
  parsed.error = std::move(message);
  return parsed;
}

// `entry` is a line with its comment and surrounding blanks removed; never empty.
ParsedLine parse_entry(std::string_view entry) {
  const std::vector<std::string_view> tokens = split_blanks(entry);
  if (tokens.size() == 1) {
    return malformed(std::string(kExpected) + " but " + quoted(entry) + " has no slots; write " +
                     quoted(std::string(entry) + " slots=N"));
  }
  if (tokens.size() > 2) {
    return malformed(std::string(kExpected) + ", got " + quoted(entry) + "; write " +
                     quoted(std::string(tokens[0]) + " slots=N") +
                     ", one host per line and no blanks around \"=\"");
  }
  ParsedLine parsed;
  parsed.host = tokens[0];
  if (!tokens[1].starts_with(kSlotsKey)) {
    return malformed(std::string(kExpected) + ", got " + quoted(entry) + "; write " +
                     quoted(std::string(parsed.host) + " slots=N"));
  }
  if (!parse_whole_number(tokens[1].substr(kSlotsKey.size()), parsed.slots) || parsed.slots < 1) {
    return malformed(std::string(kExpected) + " with N a whole number >= 1, got " +
                     quoted(tokens[1]) + "; write for example " +
                     quoted(std::string(parsed.host) + " slots=1"));
  }
  return parsed;
}

}  // namespace

ParsedHostfile parse_hostfile(std::string_view text) {
  ParsedHostfile result;
  // Views into `text`: a hash lookup keeps 16k-host files linear.
  std::unordered_map<std::string_view, int> declared_on;
  int line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    ++line_number;
    const size_t newline = text.find('\n', start);
    std::string_view line = text.substr(start, newline - start);
    start = newline == std::string_view::npos ? text.size() : newline + 1;
    if (line.ends_with('\r')) line.remove_suffix(1);  // CRLF files written on Windows
    const std::string_view entry = trim_blanks(line.substr(0, line.find('#')));
    if (entry.empty()) continue;

    ParsedLine parsed = parse_entry(entry);
    if (!parsed.error.empty()) {
      result.errors.push_back({line_number, std::move(parsed.error)});
      continue;
    }
    const auto [first, inserted] = declared_on.emplace(parsed.host, line_number);
    if (!inserted) {
      result.errors.push_back(
          {line_number, "host " + quoted(parsed.host) + " is already declared on line " +
                            std::to_string(first->second) + "; list each host once"});
      continue;
    }
    result.hosts.push_back({std::string(parsed.host), parsed.slots, line_number});
  }
  // A file whose every entry is malformed already has errors that say why.
  if (result.hosts.empty() && result.errors.empty()) {
    result.errors.push_back(
        {0, "hostfile lists no hosts; add one line \"hostname slots=N\" per host"});
  }
  return result;
}

}  // namespace dslaunch::topology
