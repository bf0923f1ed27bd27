#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::topology {

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

// Parses a DeepSpeed hostfile: one `hostname slots=N` per line (N >= 1),
// leading and trailing blanks allowed, `#` starting a comment (whole-line or
// after the entry), blank lines ignored. A malformed line, a duplicate host
// (naming the line of the first) and a file with no hosts are errors. Never
// throws; pure.
ParsedHostfile parse_hostfile(std::string_view text);

}  // namespace dslaunch::topology
