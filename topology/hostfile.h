#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::topology {

// The most slots (GPUs, or CPU ranks) one host may have: far above any real
// machine, low enough that a typo such as `slots=2147483647` is an error naming
// the line instead of a slot list that exhausts memory. The hostfile and Slurm
// parsers enforce it; the spec's inline hosts should too.
inline constexpr int kMaxSlotsPerHost = 1 << 16;

// The longest host name accepted, as in DNS (RFC 1035).
inline constexpr size_t kMaxHostNameLength = 253;

// Whether `name` is a host name dslaunch accepts: 1 to 253 characters, each an
// ASCII letter, digit, '-', '.' or '_' (RFC 952/1123 names, plus the
// underscore some clusters use), not starting with '-'. Such names are valid
// UTF-8, can be named by include/exclude (where ':' and '@' are separators),
// and are safe in rankfiles and on ssh/mpirun command lines. Pure.
bool valid_host_name(std::string_view name);

// Empty when valid_host_name(name); otherwise one sentence saying what is
// wrong with `name` and what a host name may hold, starting with
// `host name "..."` (the name quoted, shortened when long). Pure.
std::string host_name_problem(std::string_view name);

// A problem in a text input, located by 1-based line (0 when the problem is
// the input as a whole, such as an empty hostfile). Callers add the file name.
struct LineError {
  int line = 0;
  std::string message;  // says what is wrong and what to write instead
};

struct HostfileEntry {
  std::string host;
  int slots = 0;
  int line = 0;  // where the host was declared
};

struct ParsedHostfile {
  std::vector<HostfileEntry> hosts;  // in file order
  std::vector<LineError> errors;     // every problem found, in line order
};

// Parses a DeepSpeed hostfile: one `hostname slots=N` per line (1 <= N <=
// kMaxSlotsPerHost), leading and trailing blanks allowed, `#` starting a
// comment (whole-line or after the entry), blank lines ignored. A malformed
// line, an invalid host name (see valid_host_name), a duplicate host (naming
// the line of the first) and a file with no hosts are errors. Never throws;
// pure.
ParsedHostfile parse_hostfile(std::string_view text);

}  // namespace dslaunch::topology
