#include "topology/hostfile.h"

#include "topology/text_fields.h"

#include <unordered_map>

namespace dslaunch::topology {
namespace {

constexpr std::string_view kSlotsKey = "slots=";
constexpr std::string_view kExpected = R"(expected "hostname slots=N")";
constexpr std::string_view kNameCharacters =
    R"(a host name may hold only ASCII letters, digits, "-", "." and "_")";

bool host_name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// `name` quoted for a message, its first 32 characters only when it is long:
// the message should fit a terminal line.
std::string quoted_name(std::string_view name) {
  constexpr size_t kShown = 32;
  if (name.size() <= kShown + 8) return quoted(name);
  std::string text = quoted(name.substr(0, kShown));
  text.insert(text.size() - 1, "...");
  return text;
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
  if (std::string problem = host_name_problem(parsed.host); !problem.empty()) {
    return malformed(std::move(problem));
  }
  if (!tokens[1].starts_with(kSlotsKey)) {
    return malformed(std::string(kExpected) + ", got " + quoted(entry) + "; write " +
                     quoted(std::string(parsed.host) + " slots=N"));
  }
  if (!parse_whole_number(tokens[1].substr(kSlotsKey.size()), parsed.slots) || parsed.slots < 1) {
    return malformed(std::string(kExpected) + " with N a whole number >= 1, got " +
                     quoted(tokens[1]) + "; write for example " +
                     quoted(std::string(parsed.host) + " slots=1"));
  }
  if (parsed.slots > kMaxSlotsPerHost) {
    return malformed(quoted(tokens[1]) + " is more than the " + std::to_string(kMaxSlotsPerHost) +
                     " slots one host may have; write the host's GPU count, for example " +
                     quoted(std::string(parsed.host) + " slots=8"));
  }
  return parsed;
}

}  // namespace

bool valid_host_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxHostNameLength || name.front() == '-') return false;
  for (const char c : name) {
    if (!host_name_character(c)) return false;
  }
  return true;
}

std::string host_name_problem(std::string_view name) {
  if (valid_host_name(name)) return {};  // the common case builds no message
  if (name.empty()) return "host name \"\" is empty; write a name such as \"worker-0\"";
  const std::string shown = "host name " + quoted_name(name);
  if (name.size() > kMaxHostNameLength) {
    return shown + " is " + std::to_string(name.size()) +
           " characters long; a host name has at most " + std::to_string(kMaxHostNameLength);
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (host_name_character(c)) continue;
    // quoted() writes a byte outside printable ASCII as \xNN.
    const std::string held = shown + " holds " + quoted(name.substr(i, 1)) + " (character " +
                             std::to_string(i + 1) + ")";
    if (c == ':' || c == '@') {
      return held + ", which separates hosts and slots in include/exclude; " +
             std::string(kNameCharacters);
    }
    return held + "; " + std::string(kNameCharacters);
  }
  if (name.front() == '-') {
    return shown +
           " starts with \"-\", which ssh and mpirun would read as an option; start it "
           "with a letter or digit";
  }
  return {};
}

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
