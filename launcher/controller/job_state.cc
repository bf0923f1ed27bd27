#include "launcher/controller/job_state.h"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

namespace dslaunch::controller {
namespace {

bool valid_rank(int rank, int world_size) { return rank >= 0 && rank < world_size; }

// Our own stop sends SIGTERM, then SIGKILL after the grace period.
bool is_stop_signal(int signal) { return signal == SIGTERM || signal == SIGKILL; }

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

// The first (or last) non-blank line of `text`, trimmed.
std::string_view pick_line(std::string_view text, bool last) {
  text = trim(text);
  if (last) {
    const auto newline = text.rfind('\n');
    return newline == std::string_view::npos ? text : trim(text.substr(newline + 1));
  }
  return trim(text.substr(0, text.find('\n')));
}

std::string signal_name(int signal) {
  // glibc returns "Unknown signal N" for numbers it does not know.
  const char* name = strsignal(signal);
  return name ? name : fmt::format("signal {}", signal);
}

std::string seconds(std::chrono::milliseconds duration) {
  return fmt::format("{:g}s", static_cast<double>(duration.count()) / 1000.0);
}

}  // namespace

const char* to_string(JobPhase phase) {
  switch (phase) {
    case JobPhase::kPending:
      return "PENDING";
    case JobPhase::kStarting:
      return "STARTING";
    case JobPhase::kRunning:
      return "RUNNING";
    case JobPhase::kSucceeded:
      return "SUCCEEDED";
    case JobPhase::kFailed:
      return "FAILED";
    case JobPhase::kStopped:
      return "STOPPED";
  }
  return "UNKNOWN";
}

const char* to_string(RankPhase phase) {
  switch (phase) {
    case RankPhase::kStarting:
      return "starting";
    case RankPhase::kRunning:
      return "running";
    case RankPhase::kLost:
      return "lost";
    case RankPhase::kExited:
      return "exited";
  }
  return "unknown";
}

bool is_final(JobPhase phase) {
  return phase == JobPhase::kSucceeded || phase == JobPhase::kFailed || phase == JobPhase::kStopped;
}

std::string RootCause::to_string() const {
  if (!lost_hosts.empty()) {
    std::vector<std::string> named;
    for (const auto& [host, seen] : lost_hosts) named.push_back(fmt::format("{} ({})", host, seen));
    RootCause symptom = *this;
    symptom.lost_hosts.clear();
    return fmt::format("host{} lost: {}; first seen as: {}", lost_hosts.size() > 1 ? "s" : "",
                       fmt::join(named, ", "), symptom.to_string());
  }
  if (rank < 0) return std::string(pick_line(message, /*last=*/false));
  std::string who = fmt::format("rank {}", rank);
  if (!host.empty()) who += fmt::format(" ({}, pid {})", host, pid);

  std::string what;
  std::string_view detail;
  if (hung && in_collective) {
    what = "waited in a collective past fault_tolerance.collective_timeout (hung?)";
    detail = pick_line(message, /*last=*/false);
  } else if (hung && stuck_at_step) {
    what = *stuck_at_step == 0
               ? fmt::format("made no step progress for {}: it never began its first step (hung?)",
                             seconds(silence_allowed))
               : fmt::format("made no step progress for {}: stuck at step {} (hung?)",
                             seconds(silence_allowed), *stuck_at_step);
  } else if (hung) {
    what = fmt::format("sent no heartbeat for {}{} (hung?)", seconds(silence_allowed),
                       in_checkpoint ? " while writing a checkpoint" : "");
  } else if (exit_signal) {
    what = fmt::format("was killed by signal {} ({})", *exit_signal, signal_name(*exit_signal));
    detail = pick_line(message, /*last=*/true);
  } else if (exit_code) {
    what = fmt::format("exited with code {}", *exit_code);
    detail = pick_line(message, /*last=*/true);
  } else {
    what = "reported an error";
    detail = pick_line(message, /*last=*/false);
  }
  if (detail.empty()) return fmt::format("{} {}", who, what);
  return fmt::format("{} {}: {}", who, what, detail);
}

JobState::JobState(int world_size, FailureTimeouts timeouts, const Clock& clock)
    : world_size_(world_size < 0 ? 0 : world_size),
      timeouts_(timeouts),
      clock_(clock),
      ranks_(world_size_),
      registered_(world_size_, false) {
  for (int rank = 0; rank < world_size_; ++rank) ranks_[rank].rank = rank;
}

void JobState::start() {
  std::lock_guard lock(mutex_);
  if (phase_ == JobPhase::kPending) phase_ = JobPhase::kStarting;
}

bool JobState::on_register(int rank, const std::string& host, int64_t pid,
                           const std::string& device) {
  std::lock_guard lock(mutex_);
  if (!valid_rank(rank, world_size_) || registered_[rank] || is_final(phase_)) return false;
  RankRecord& record = ranks_[rank];
  if (record.phase != RankPhase::kStarting) return false;  // its process already ended
  registered_[rank] = true;
  record.host = host;
  record.pid = pid;
  record.device = device;
  record.phase = RankPhase::kRunning;
  record.last_heartbeat = clock_.now();
  record.last_progress = record.last_heartbeat;

  bool all_registered = true;
  for (bool registered : registered_) all_registered = all_registered && registered;
  if (all_registered) phase_ = JobPhase::kRunning;
  return true;
}

void JobState::on_heartbeat(int rank, const v1::Heartbeat& heartbeat) {
  std::lock_guard lock(mutex_);
  if (!valid_rank(rank, world_size_) || is_final(phase_)) return;
  RankRecord& record = ranks_[rank];
  if (!registered_[rank] || record.phase != RankPhase::kRunning) return;
  record.last_heartbeat = clock_.now();
  // Checkpointing has its own allowance (checkpoint_timeout), so it counts as
  // progress: the step clock restarts when the rank goes back to training.
  if (heartbeat.step() != record.heartbeat.step() ||
      heartbeat.phase() == v1::PHASE_CHECKPOINT) {
    record.last_progress = record.last_heartbeat;
  }
  record.heartbeat = heartbeat;
}

RootCause JobState::cause_of_locked(int rank, std::string message) const {
  const RankRecord& record = ranks_[rank];
  RootCause cause;
  cause.rank = rank;
  cause.host = record.host;
  cause.pid = record.pid;
  cause.message = std::move(message);
  return cause;
}

void JobState::on_error_event(int rank, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (!valid_rank(rank, world_size_)) return;
  fail_locked(cause_of_locked(rank, message));
}

void JobState::on_hang_event(int rank, const std::string& message,
                             const v1::HungCollective& hung) {
  std::lock_guard lock(mutex_);
  if (!valid_rank(rank, world_size_)) return;
  RootCause cause = cause_of_locked(rank, message);
  cause.hung = true;
  cause.in_collective = true;
  std::vector<std::string> lagging;
  for (const int member : hung.world_ranks()) {
    if (!valid_rank(member, world_size_) || member == rank) continue;
    for (const v1::GroupProgress& group : ranks_[member].heartbeat.collectives()) {
      if (group.group() == hung.group() && group.started() < hung.sequence()) {
        lagging.push_back(fmt::format("rank {} (its last was #{})", member, group.started()));
      }
    }
  }
  if (!lagging.empty()) {
    cause.message += fmt::format("; never started by {}", fmt::join(lagging, ", "));
  }
  fail_locked(std::move(cause));
}

void JobState::on_rank_exit(int rank, std::optional<int> exit_code, std::optional<int> exit_signal,
                            const std::string& stderr_tail) {
  std::lock_guard lock(mutex_);
  if (!valid_rank(rank, world_size_)) return;
  RankRecord& record = ranks_[rank];
  if (record.phase == RankPhase::kExited) return;
  if (!exit_code && !exit_signal) exit_code = -1;
  record.phase = RankPhase::kExited;
  record.exit_code = exit_code;
  record.exit_signal = exit_signal;

  const bool clean = exit_signal ? stop_requested_ && is_stop_signal(*exit_signal)
                                 : exit_code.has_value() && *exit_code == 0;
  if (!clean) {
    RootCause cause = cause_of_locked(rank, stderr_tail);
    cause.exit_code = exit_code;
    cause.exit_signal = exit_signal;
    fail_locked(std::move(cause));
    return;
  }
  if (is_final(phase_)) return;
  // Every rank that left before this one left cleanly too, or the job would be final.
  for (const RankRecord& other : ranks_) {
    if (other.phase != RankPhase::kExited) return;
  }
  phase_ = stop_requested_ ? JobPhase::kStopped : JobPhase::kSucceeded;
}

std::vector<int> JobState::check_heartbeats() {
  std::lock_guard lock(mutex_);
  std::vector<int> lost;
  if (is_final(phase_)) return lost;
  const Clock::TimePoint now = clock_.now();
  std::optional<RootCause> first;
  Clock::TimePoint first_deadline{};
  for (RankRecord& record : ranks_) {
    if (!registered_[record.rank] || record.phase != RankPhase::kRunning) continue;
    const bool in_checkpoint = record.heartbeat.phase() == v1::PHASE_CHECKPOINT;
    const auto allowed = in_checkpoint ? timeouts_.checkpoint_timeout : timeouts_.heartbeat_timeout;
    const Clock::TimePoint deadline = record.last_heartbeat + allowed;
    if (now <= deadline) continue;
    record.phase = RankPhase::kLost;
    lost.push_back(record.rank);
    // Of several ranks found lost at once, the one that went past its deadline
    // first failed first (ties go to the lower rank).
    if (!first || deadline < first_deadline) {
      first_deadline = deadline;
      first.emplace();
      first->rank = record.rank;
      first->host = record.host;
      first->pid = record.pid;
      first->hung = true;
      first->silence_allowed = allowed;
      first->in_checkpoint = in_checkpoint;
    }
  }
  if (first) fail_locked(std::move(*first));
  return lost;
}

std::optional<int> JobState::check_step_progress() {
  std::lock_guard lock(mutex_);
  if (is_final(phase_) || timeouts_.step_timeout.count() == 0) return std::nullopt;
  const Clock::TimePoint now = clock_.now();
  std::optional<RootCause> first;
  Clock::TimePoint first_deadline{};
  for (const RankRecord& record : ranks_) {
    if (!registered_[record.rank] || record.phase != RankPhase::kRunning) continue;
    const v1::Phase phase = record.heartbeat.phase();
    if (phase == v1::PHASE_CHECKPOINT || phase == v1::PHASE_FINISHED) continue;
    // Ranks do not report evaluation as a phase of its own: it counts
    // against the step it follows (it is bounded by eval_batches).
    const int64_t step = record.heartbeat.step();
    const auto allowed = step == 0 ? std::max(timeouts_.step_timeout, timeouts_.checkpoint_timeout)
                                   : timeouts_.step_timeout;
    const Clock::TimePoint deadline = record.last_progress + allowed;
    if (now <= deadline) continue;
    if (!first || deadline < first_deadline) {
      first_deadline = deadline;
      first.emplace();
      first->rank = record.rank;
      first->host = record.host;
      first->pid = record.pid;
      first->hung = true;
      first->silence_allowed = allowed;
      first->stuck_at_step = step;
    }
  }
  if (!first) return std::nullopt;
  const int rank = first->rank;
  fail_locked(std::move(*first));
  return rank;
}

void JobState::request_stop() {
  std::lock_guard lock(mutex_);
  if (!is_final(phase_)) stop_requested_ = true;
}

void JobState::mark_stopped() {
  std::lock_guard lock(mutex_);
  if (!is_final(phase_)) phase_ = JobPhase::kStopped;
}

void JobState::mark_failed(const std::string& reason) {
  std::lock_guard lock(mutex_);
  RootCause cause;
  cause.message = reason;
  fail_locked(std::move(cause));
}

void JobState::blame_lost_hosts(std::vector<std::pair<std::string, std::string>> hosts) {
  std::lock_guard lock(mutex_);
  if (phase_ == JobPhase::kFailed && root_cause_) root_cause_->lost_hosts = std::move(hosts);
}

JobPhase JobState::phase() const {
  std::lock_guard lock(mutex_);
  return phase_;
}

bool JobState::stop_requested() const {
  std::lock_guard lock(mutex_);
  return stop_requested_;
}

std::optional<RootCause> JobState::root_cause() const {
  std::lock_guard lock(mutex_);
  return root_cause_;
}

std::vector<RankRecord> JobState::ranks() const {
  std::lock_guard lock(mutex_);
  return ranks_;
}

v1::Heartbeat JobState::latest_heartbeat() const {
  std::lock_guard lock(mutex_);
  const RankRecord* furthest = nullptr;
  for (const RankRecord& record : ranks_) {
    if (!furthest || record.heartbeat.step() > furthest->heartbeat.step()) furthest = &record;
  }
  return furthest ? furthest->heartbeat : v1::Heartbeat{};
}

// The first failure in time wins: once final (failed, or ended otherwise),
// nothing replaces the phase or the root cause.
void JobState::fail_locked(RootCause cause) {
  if (is_final(phase_)) return;
  root_cause_ = std::move(cause);
  phase_ = JobPhase::kFailed;
}

}  // namespace dslaunch::controller
