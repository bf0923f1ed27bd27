#pragma once

#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dslaunch::runner {

enum class OutputStream { kStdout, kStderr };

// How the launcher marks each line with its rank: mpirun --tag-output
// ("[1,3]<stdout>:text") or srun --label ("3: text", stream by pipe).
enum class OutputTags { kMpirun, kSrun };

// Splits the launcher's output into one file per rank and stream, and keeps
// the last lines of every rank's stderr for failure reports. Lines without a
// rank tag (the launcher's own messages) go to the launcher log. Output is
// written as it arrives (files are flushed per chunk) so `dslaunch logs
// --follow` sees it live. Not thread-safe: one reader thread feeds it.
class RankOutput {
 public:
  // `path_of(rank, stream)` names a rank's file ("" for the launcher's own
  // lines: rank -1). Files are opened on first use, appended to.
  // `on_launcher_line`, when set, also sees each of the launcher's own lines
  // (to read its failure reports).
  RankOutput(OutputTags tags, std::function<std::string(int rank, OutputStream)> path_of,
             size_t tail_lines = 20,
             std::function<void(std::string_view)> on_launcher_line = nullptr);

  // Bytes read from the launcher's stdout or stderr pipe; partial lines are
  // kept until their newline arrives.
  void feed(OutputStream pipe, std::string_view bytes);
  // Writes out any unterminated last lines (the launcher exited).
  void finish();

  // The last lines (up to tail_lines) rank `rank` wrote to stderr.
  std::vector<std::string> stderr_tail(int rank) const;

 private:
  void route(OutputStream pipe, std::string_view line);
  void write(int rank, OutputStream stream, std::string_view text);

  OutputTags tags_;
  std::function<std::string(int, OutputStream)> path_of_;
  size_t tail_lines_;
  std::function<void(std::string_view)> on_launcher_line_;
  std::string pending_[2];
  std::map<std::pair<int, int>, std::unique_ptr<FILE, int (*)(FILE*)>> files_;
  std::map<int, std::deque<std::string>> tails_;
};

}  // namespace dslaunch::runner
