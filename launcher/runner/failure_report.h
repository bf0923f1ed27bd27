#pragma once

#include <optional>
#include <string_view>

namespace dslaunch::runner {

// The first failed rank as the launcher reports it. mpirun and srun know
// every rank's exit status, and print the first failure in their own words;
// this reads those words.
struct LauncherFailure {
  int rank = -1;
  std::optional<int> exit_code;
  std::optional<int> signal;
};

// Reads one line of the launcher's own output (untagged). Open MPI 4:
//   "mpirun noticed that process rank 1 with PID 4121 on node n1 exited on signal 9 (Killed)."
//   "  Process name: [[32961,1],1]" then "  Exit code:    3" (two lines: feed both)
// Slurm:
//   "srun: error: n1: task 3: Exited with exit code 2"
//   "srun: error: n1: task 1: Killed" (signal 9), "...: task 1: Terminated" (signal 15)
// Returns a failure once it is complete. Not thread-safe (keeps the
// "Process name" line until its "Exit code" line).
class FailureReportReader {
 public:
  std::optional<LauncherFailure> read_line(std::string_view line);

 private:
  std::optional<int> pending_rank_;
};

}  // namespace dslaunch::runner
