#pragma once

#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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
//
// A line is held until its newline arrives, up to kMaxPendingLine bytes: a
// longer one is written out in pieces of that size as it comes (to the file
// its first piece's tag names, without a newline between pieces), so a rank
// printing without newlines cannot make the launcher hold unbounded memory.
// Its stderr tail keeps the first piece only.
class RankOutput {
 public:
  static constexpr size_t kMaxPendingLine = 64 * 1024;

  // `path_of(rank, stream)` names a rank's file ("" for the launcher's own
  // lines: rank -1). Files are opened on first use, appended to.
  // `on_launcher_line`, when set, also sees each of the launcher's own lines
  // (to read its failure reports).
  RankOutput(OutputTags tags, std::function<std::string(int rank, OutputStream)> path_of,
             size_t tail_lines = 20,
             std::function<void(std::string_view)> on_launcher_line = nullptr);

  // Bytes read from the launcher's stdout or stderr pipe; partial lines are
  // kept until their newline arrives (or kMaxPendingLine is reached). Only
  // `bytes` are scanned for newlines, so feeding is linear in what arrives.
  void feed(OutputStream pipe, std::string_view bytes);
  // Writes out any unterminated last lines (the launcher exited).
  void finish();

  // The last lines (up to tail_lines) rank `rank` wrote to stderr.
  std::vector<std::string> stderr_tail(int rank) const;

  // Bytes held for unterminated lines, both pipes together (at most
  // 2 * kMaxPendingLine).
  size_t pending_bytes() const { return pending_[0].size() + pending_[1].size(); }

 private:
  // Where the pieces of a line longer than kMaxPendingLine go.
  struct Destination {
    int rank;
    OutputStream stream;
  };

  // Writes pending_[pipe] out: a whole line when `line_ended`, else a piece.
  void flush_pending(OutputStream pipe, bool line_ended);
  // Writes a line, or the first piece of a long one, where its tag says;
  // returns where that was.
  Destination route(OutputStream pipe, std::string_view line, bool line_ended);
  void write(int rank, OutputStream stream, std::string_view text, bool line_ended);

  OutputTags tags_;
  std::function<std::string(int, OutputStream)> path_of_;
  size_t tail_lines_;
  std::function<void(std::string_view)> on_launcher_line_;
  std::string pending_[2];
  std::optional<Destination> continuing_[2];  // set while a long line is written in pieces
  std::map<std::pair<int, int>, std::unique_ptr<FILE, int (*)(FILE*)>> files_;
  std::map<int, std::deque<std::string>> tails_;
};

}  // namespace dslaunch::runner
