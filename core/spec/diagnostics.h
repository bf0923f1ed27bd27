#pragma once

#include <map>
#include <string>
#include <vector>

namespace dslaunch::spec {

// Where a value came from: a file position (1-based line and column; 0 when
// unknown), or a command-line override such as `--set training.steps=10`.
struct Location {
  std::string file;
  int line = 0;
  int column = 0;
  std::string origin;  // non-empty for values that did not come from a file

  std::string to_string() const;  // "file:line:col", "file:line", "file", or the origin
};

struct Diagnostic {
  enum class Severity { kError, kWarning };
  Severity severity = Severity::kError;
  Location location;
  std::string message;  // what is wrong and what to do about it
};

// Collects every problem found while loading a job, so the user sees them all
// at once. Not thread-safe.
class Diagnostics {
 public:
  void error(const Location& where, std::string message);
  void warning(const Location& where, std::string message);

  bool has_errors() const;
  const std::vector<Diagnostic>& all() const { return diagnostics_; }
  std::vector<std::string> warnings() const;  // formatted warnings only

  // At most this many diagnostics are formatted; a spec with 200k unknown
  // keys gets 50 lines and a count, not 40 MB.
  static constexpr size_t kMaxFormatted = 50;

  // One line per diagnostic: command-line ones first, then by file, line
  // and column, the first kMaxFormatted of them and then "... and N more
  // errors" for the rest:
  //   "jobs/demo.yaml:12:3: error: unknown key 'trian_batch_size' ..."
  // Text from the spec is passed through terminal_safe (terminal_text.h) in
  // these and in warnings(): a control character shows as "\x1b".
  std::string format() const;

 private:
  std::vector<Diagnostic> diagnostics_;
};

// The location of every key path read from the spec ("training.zero_optimization.stage"),
// so checks that span several keys can point at the right one.
class SourceMap {
 public:
  void set(const std::string& path, Location where);
  // The location of `path`, else of its nearest recorded parent (parents of
  // "cluster.hosts[1].slots" are "cluster.hosts[1]", "cluster.hosts" and
  // "cluster"), else of the spec file as a whole.
  Location find(const std::string& path) const;
  void set_fallback(Location where) { fallback_ = std::move(where); }

 private:
  std::map<std::string, Location> locations_;
  Location fallback_;
};

}  // namespace dslaunch::spec
