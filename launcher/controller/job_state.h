#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "launcher/controller/clock.h"
#include "proto/dslaunch.pb.h"

namespace dslaunch::controller {

enum class JobPhase { kPending, kStarting, kRunning, kSucceeded, kFailed, kStopped };
enum class RankPhase { kStarting, kRunning, kLost, kExited };

// "PENDING", "STARTING", ...; "starting", "running", "lost", "exited".
const char* to_string(JobPhase phase);
const char* to_string(RankPhase phase);
bool is_final(JobPhase phase);

// The first failure of an attempt: what `dslaunch status` shows as the reason.
struct RootCause {
  int rank = -1;  // -1: not a rank's failure (mark_failed); `message` says what
  std::string host;
  int64_t pid = 0;
  std::optional<int> exit_code;                  // set when the rank exited with a code
  std::optional<int> exit_signal;                // set when a signal ended it
  bool hung = false;                             // no heartbeat within the timeout
  std::chrono::milliseconds silence_allowed{0};  // when hung: the timeout it exceeded
  bool in_checkpoint = false;  // when hung: its last heartbeat said PHASE_CHECKPOINT
  // When hung: the rank itself reported a collective past collective_timeout
  // (`message` names it, its group and peers).
  bool in_collective = false;
  // When hung while heartbeating: the step its heartbeats kept reporting
  // (0: it never began one) for `silence_allowed`.
  std::optional<int64_t> stuck_at_step;
  std::string message;         // the rank's own error report, or the last stderr lines
  // Hosts found unreachable after the failure, each with what was seen; the
  // failure is then theirs ("host node2 lost (...): rank 2 ...").
  std::vector<std::pair<std::string, std::string>> lost_hosts;
  // One line, e.g. "rank 3 (node02, pid 4121) was killed by signal 9 (Killed)". Of a
  // multi-line message it shows the first line of an error report and the last line of
  // a stderr tail (where a crash says what went wrong).
  std::string to_string() const;
};

struct RankRecord {
  int rank = 0;
  RankPhase phase = RankPhase::kStarting;
  std::string host;
  int64_t pid = 0;
  std::string device;
  Clock::TimePoint last_heartbeat{};  // registration counts as the first
  // When its reported step last changed, or it last reported PHASE_CHECKPOINT;
  // registration counts as the first.
  Clock::TimePoint last_progress{};
  v1::Heartbeat heartbeat;            // the latest
  std::optional<int> exit_code;
  std::optional<int> exit_signal;
};

struct FailureTimeouts {
  std::chrono::milliseconds heartbeat_timeout{60'000};
  // While a rank reports PHASE_CHECKPOINT its silence may last this long.
  std::chrono::milliseconds checkpoint_timeout{600'000};
  // A heartbeating rank whose step does not advance for this long is hung;
  // 0 = never. Before its first step it gets max(this, checkpoint_timeout),
  // since starting may read a checkpoint.
  std::chrono::milliseconds step_timeout{0};
};

// One attempt's state: the job phase, every rank, and the root cause of a
// failure. Driven by the controller's threads (gRPC handlers, the process
// watcher, the watchdog); every method is thread-safe. Transitions only go
// forward: PENDING -> STARTING -> RUNNING -> SUCCEEDED | FAILED | STOPPED, and
// once final nothing changes except ranks' exit records.
class JobState {
 public:
  JobState(int world_size, FailureTimeouts timeouts, const Clock& clock);

  void start();  // PENDING -> STARTING, when the runner is launched

  // A rank registered: it is running, and RUNNING once every rank has. Returns
  // false (and changes nothing) for a rank outside the world or registered twice,
  // for one whose process already ended, and once the job is final.
  bool on_register(int rank, const std::string& host, int64_t pid, const std::string& device);
  // Kept as the rank's latest; ignored unless the rank is registered and running
  // and the job is not final.
  void on_heartbeat(int rank, const v1::Heartbeat& heartbeat);
  // A rank reported an error: the attempt fails with it as root cause if first.
  void on_error_event(int rank, const std::string& message);
  // A rank reported a collective past its timeout: the attempt fails as hung
  // (stacks are collected, then the ranks ended) with it as root cause if
  // first. The cause names the group's members whose latest heartbeat shows
  // they never started that collective (their count for the group below its
  // sequence number): the ranks the others wait for.
  void on_hang_event(int rank, const std::string& message, const v1::HungCollective& hung);

  // A rank's process ended. Non-zero code or a signal fails the attempt (root
  // cause if first); code 0 marks it exited, and when every rank exited 0 the
  // job SUCCEEDED (or STOPPED if a stop was requested). After request_stop,
  // SIGTERM and SIGKILL are ours and count as a clean exit; once every rank has
  // exited the job is STOPPED. A second exit of the same rank is ignored.
  // Exactly one of exit_code and exit_signal is expected (as waitpid reports);
  // with neither, the exit counts as code -1.
  void on_rank_exit(int rank, std::optional<int> exit_code, std::optional<int> exit_signal,
                    const std::string& stderr_tail);

  // Registered, running ranks silent for longer than their timeout become lost;
  // the first to pass its deadline fails the attempt as hung. Ranks that never
  // registered are left to the controller's registration timeout. Does nothing
  // once the job is final. Call periodically; returns the ranks newly declared
  // lost, in rank order.
  std::vector<int> check_heartbeats();
  // Registered, running ranks that heartbeat but whose step has not changed
  // for longer than step_timeout (not while they checkpoint, nor once they
  // report PHASE_FINISHED): the first to pass its deadline fails the attempt
  // as hung, with the step it is stuck at. Does nothing once the job is final
  // or with no step_timeout. Call periodically, after check_heartbeats;
  // returns the rank that failed the attempt, if one did.
  std::optional<int> check_step_progress();

  // A stop was asked for (ignored once final): the final phase will be STOPPED
  // unless a rank fails by other means than our SIGTERM/SIGKILL.
  void request_stop();
  void mark_stopped();  // the controller ended the job on request (no-op once final)
  // E.g. the launcher itself failed to start: root cause with rank -1 if first.
  void mark_failed(const std::string& reason);
  // After a failure: hosts that no longer answer (host, what was seen),
  // which become the root cause's subject.
  void blame_lost_hosts(std::vector<std::pair<std::string, std::string>> hosts);

  JobPhase phase() const;
  bool stop_requested() const;
  std::optional<RootCause> root_cause() const;
  std::vector<RankRecord> ranks() const;
  // The furthest step any rank reported, and that rank's latest heartbeat.
  v1::Heartbeat latest_heartbeat() const;

 private:
  void fail_locked(RootCause cause);
  // A failure of `rank` (valid) with its host and pid as registered.
  RootCause cause_of_locked(int rank, std::string message) const;

  const int world_size_;
  const FailureTimeouts timeouts_;
  const Clock& clock_;
  mutable std::mutex mutex_;
  JobPhase phase_ = JobPhase::kPending;
  bool stop_requested_ = false;
  std::vector<RankRecord> ranks_;
  std::vector<bool> registered_;
  std::optional<RootCause> root_cause_;
};

}  // namespace dslaunch::controller
