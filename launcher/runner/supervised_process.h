#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/runner/rank_output.h"

namespace dslaunch::runner {

struct ExitStatus {
  std::optional<int> code;        // exited normally with this code
  std::optional<int> signal;      // ended by this signal
  std::string to_string() const;  // "exit code 3", "signal 9 (Killed)"
};

// The launcher (mpirun or srun) of one attempt. It runs in a session of its
// own, which every rank it starts on this host inherits, so the whole job
// can be found by session id and killed by pid, even ranks that moved into
// process groups of their own (Open MPI does that). It is also told to exit
// (SIGTERM) if the controller dies, through PR_SET_PDEATHSIG. Not
// thread-safe: one thread supervises it.
//
// Killing by session id is only safe while that id cannot name anyone else,
// so the launcher, the session's leader, is not reaped when it exits: its
// zombie keeps its pid, and with it the session id, from being reused until
// terminate() (or the destructor) has killed the rest of the session. Each
// member found in /proc is signalled through a pidfd after its session is
// checked again, so a member that exited meanwhile and whose pid was reused
// is not hit either.
class SupervisedProcess {
 public:
  // Starts `argv` (looked up on PATH) with `environment` added to this
  // process's own. nullptr and `error` set when it cannot start.
  static std::unique_ptr<SupervisedProcess> start(
      const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment,
      std::string& error);
  ~SupervisedProcess();  // terminates whatever still runs (no grace)

  pid_t pid() const { return pid_; }

  // Waits up to `timeout` for output and feeds it to `output`. Returns false
  // once both pipes are closed (the launcher and its ranks are done writing).
  bool pump_output(RankOutput& output, std::chrono::milliseconds timeout);

  // The launcher's exit status, once it has exited (non-blocking). It is
  // left a zombie (see above).
  std::optional<ExitStatus> poll_exit();

  // Every live process in the launcher's session: the launcher and the ranks
  // it started on this host (read from /proc).
  std::vector<pid_t> session_processes() const;

  // SIGTERM to the launcher (mpirun and srun forward it to their ranks);
  // after `grace`, SIGKILL to every process still in the session. Blocks
  // until they are gone (or `grace` + 5 s passed), then reaps the launcher.
  // Returns the exit status. The destructor does this with no grace unless
  // it was done.
  ExitStatus terminate(std::chrono::milliseconds grace);

 private:
  SupervisedProcess(pid_t pid, int stdout_fd, int stderr_fd)
      : pid_(pid), fds_{stdout_fd, stderr_fd} {}
  void kill_session(int signal) const;

  pid_t pid_;
  int fds_[2];
  std::optional<ExitStatus> exit_;
  bool reaped_ = false;
};

// Live processes whose session id is `session` (by /proc).
std::vector<pid_t> processes_in_session(pid_t session);

// Sends `signal` to `pid` only if it is a live member of `session` when the
// signal is sent: through a pidfd opened before the session is checked (so a
// pid reused after the check is not hit), or, on kernels without pidfds, with
// kill() right after the check. Returns whether the signal was sent.
bool signal_session_member(pid_t pid, pid_t session, int signal);

}  // namespace dslaunch::runner
