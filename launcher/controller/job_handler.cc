#include "launcher/controller/job_handler.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace dslaunch::controller {
namespace {

int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

JobHandler::JobHandler(JobInfo info, Attempt attempt, JobState& state, JobDirectory& directory,
                       const Clock& clock)
    : info_(std::move(info)),
      attempt_(std::move(attempt)),
      state_(state),
      directory_(directory),
      clock_(clock),
      started_unix_ms_(unix_time_ms()),
      finished_(info_.world_size, false),
      last_checkpoint_step_(attempt_.last_checkpoint_step) {
  if (attempt_.checkpoints) committer_.emplace(*attempt_.checkpoints);
}

grpc::Status JobHandler::register_rank(const v1::RegisterRequest& request,
                                       v1::RegisterReply* reply) {
  if (request.restart_count() != attempt_.number) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        fmt::format("rank {} belongs to attempt {}, not the current attempt {}",
                                    request.rank(), request.restart_count(), attempt_.number));
  }
  if (!state_.on_register(request.rank(), request.host(), request.pid(), request.device())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        fmt::format("rank {} cannot register: outside the world of {}, already "
                                    "registered, or the job has ended",
                                    request.rank(), info_.world_size));
  }
  reply->set_job_id(info_.job_id);
  reply->set_resolved_spec_yaml(attempt_.resolved_spec_yaml);
  *reply->mutable_placement() = attempt_.placements.at(request.rank());
  reply->set_heartbeat_interval_ms(attempt_.heartbeat_interval_ms);
  *reply->mutable_grid() = attempt_.grid;
  *reply->mutable_batch() = attempt_.batch;
  reply->set_job_directory(directory_.path());
  if (attempt_.checkpoints) reply->set_checkpoint_directory(attempt_.checkpoints->root);
  if (attempt_.resume) *reply->mutable_resume() = *attempt_.resume;
  record_event(request.rank(), "registered",
               fmt::format("{} pid {} {} ({})", request.host(), request.pid(), request.device(),
                           request.version()));
  return grpc::Status::OK;
}

void JobHandler::session_opened(int rank, std::shared_ptr<CommandSink> sink) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sinks_[rank] = sink;
  }
  // A rank that opens its session after a stop request missed the
  // broadcast: it gets the stop now. (The request is recorded before the
  // broadcast reads the sinks, so no rank misses both.)
  if (state_.stop_requested()) {
    v1::ControllerCommand command;
    command.set_kind(v1::ControllerCommand::KIND_STOP);
    sink->send(command);
  }
}

void JobHandler::worker_message(const v1::WorkerMessage& message) {
  const int rank = message.rank();
  if (message.has_heartbeat()) {
    state_.on_heartbeat(rank, message.heartbeat());
    if (message.heartbeat().phase() == v1::PHASE_FINISHED && rank >= 0 && rank < info_.world_size) {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_[rank] = true;
    }
    return;
  }
  if (!message.has_event()) return;
  const v1::WorkerEvent& event = message.event();
  switch (event.kind()) {
    case v1::WorkerEvent::KIND_ERROR:
      state_.on_error_event(rank, event.message());
      record_event(rank, "error", event.message());
      break;
    case v1::WorkerEvent::KIND_STEP_METRICS: {
      nlohmann::json line = {{"time_ms", unix_time_ms()},
                             {"attempt", attempt_.number},
                             {"rank", rank},
                             {"step", event.step()}};
      if (!event.message().empty()) line["what"] = event.message();
      for (const auto& [name, value] : event.metrics()) line[name] = value;
      if (line.contains("samples")) line["samples"] = line["samples"].get<int64_t>();
      std::lock_guard<std::mutex> lock(mutex_);
      std::string error;
      if (!directory_.append_metrics(line, error)) report_write_failure(error);
      if (attempt_.on_step_metrics) attempt_.on_step_metrics(line);
      break;
    }
    case v1::WorkerEvent::KIND_HUNG:
      state_.on_hang_event(rank, event.message(), event.hung());
      record_event(rank, "hung", event.message());
      break;
    case v1::WorkerEvent::KIND_STACKS:
      record_event(rank, "stacks", event.message());
      break;
    case v1::WorkerEvent::KIND_CHECKPOINT_WRITTEN:
      shard_written(rank, event);
      break;
    case v1::WorkerEvent::KIND_STOPPED:
      // Stopped on request (a signal the ranks got, or our stop) with its
      // checkpoint written: the job ends STOPPED, resumable, not SUCCEEDED.
      state_.request_stop();
      // SIGUSR1 is Slurm's warning before the time limit (--signal):
      // the job is to be requeued once stopped.
      if (event.message() == "SIGUSR1") requeue_asked_.store(true);
      record_event(rank, "stopped",
                   event.message().empty()
                       ? fmt::format("after step {}", event.step())
                       : fmt::format("after step {} ({})", event.step(), event.message()));
      break;
    default:
      break;
  }
}

void JobHandler::shard_written(int rank, const v1::WorkerEvent& event) {
  record_event(rank, "checkpoint_written", fmt::format("step {}", event.step()));
  if (!committer_) return;
  CheckpointCommitter::Outcome outcome;
  {
    std::lock_guard<std::mutex> lock(commit_mutex_);
    outcome = committer_->on_shard_written(rank, event, unix_time_ms());
  }
  if (outcome.committed) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_checkpoint_step_ = std::max(last_checkpoint_step_, outcome.step);
    }
    record_event(-1, "checkpoint_committed",
                 fmt::format("step {}: {}/{}", outcome.step, attempt_.checkpoints->root,
                             checkpoint_dir_name(outcome.step)));
  }
  for (const std::string& removed : outcome.removed) {
    record_event(-1, "checkpoint_removed", removed);
  }
  if (!outcome.error.empty()) {
    const std::string reason =
        fmt::format("checkpoint of step {}: {}", outcome.step, outcome.error);
    record_event(-1, "checkpoint_failed", reason);
    // A checkpoint that could not be committed leaves the previous one as
    // the newest; training on would only lose more work.
    if (!outcome.committed) state_.mark_failed(reason);
  }
}

void JobHandler::session_closed(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  sinks_.erase(rank);
  if (rank >= 0 && rank < info_.world_size && !finished_[rank]) sessions_lost_.push_back(rank);
}

grpc::Status JobHandler::get_status(v1::JobStatus* status) {
  *status = status_now();
  return grpc::Status::OK;
}

grpc::Status JobHandler::stop(const v1::StopRequest& request, v1::StopReply* reply) {
  if (request.now()) {
    stop_now_.store(true);
    state_.request_stop();
    record_event(-1, "stop_requested", "now");
  } else {
    request_graceful_stop();
  }
  reply->set_state(to_string(state_.phase()));
  return grpc::Status::OK;
}

grpc::Status JobHandler::checkpoint(const v1::CheckpointRequest&, v1::CheckpointReply* reply) {
  if (!attempt_.checkpoints) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "only training jobs take checkpoints");
  }
  v1::ControllerCommand command;
  command.set_kind(v1::ControllerCommand::KIND_CHECKPOINT_NOW);
  command.set_directory(attempt_.checkpoints->root);
  reply->set_ranks_asked(broadcast(command));
  if (reply->ranks_asked() == 0) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "no rank is connected yet (the job is starting or ending); try again");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reply->set_last_checkpoint_step(last_checkpoint_step_);
  }
  record_event(-1, "checkpoint_requested", fmt::format("{} rank(s) asked", reply->ranks_asked()));
  return grpc::Status::OK;
}

void JobHandler::request_graceful_stop() {
  state_.request_stop();
  record_event(-1, "stop_requested", "graceful");
  v1::ControllerCommand command;
  command.set_kind(v1::ControllerCommand::KIND_STOP);
  broadcast(command);
}

int JobHandler::broadcast(const v1::ControllerCommand& command) {
  std::vector<std::shared_ptr<CommandSink>> sinks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [rank, sink] : sinks_) sinks.push_back(sink);
  }
  int sent = 0;
  for (const auto& sink : sinks) sent += sink->send(command) ? 1 : 0;
  return sent;
}

std::vector<int> JobHandler::sessions_lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sessions_lost_;
}

void JobHandler::record_event(int rank, const std::string& kind, const std::string& detail) {
  // The job's events as they happen, at DSLAUNCH_LOG_LEVEL=debug.
  if (rank < 0) {
    spdlog::debug("event {}: {}", kind, detail);
  } else {
    spdlog::debug("event {} of rank {}: {}", kind, rank, detail);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::string error;
  if (!directory_.append_event(rank, kind, detail, error)) report_write_failure(error);
}

void JobHandler::report_write_failure(const std::string& error) {
  // The job goes on (its ranks are unaffected), but the user must learn that
  // its record is incomplete: say so once, not for every heartbeat.
  if (!write_failure_reported_.exchange(true)) {
    spdlog::error(
        "the job directory is not being written ({}); the job continues, but events and "
        "metrics are being lost",
        error);
  }
}

v1::JobStatus JobHandler::status_now() const {
  JobInfo info;
  int64_t last_checkpoint_step = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    info = info_;
    last_checkpoint_step = last_checkpoint_step_;
  }
  v1::JobStatus status =
      make_job_status(info, state_, clock_, attempt_.number, attempt_.restarts, unix_time_ms());
  status.set_last_checkpoint_step(last_checkpoint_step);
  for (const v1::AttemptSummary& earlier : attempt_.earlier) *status.add_attempts() = earlier;
  v1::AttemptSummary* current = status.add_attempts();
  current->set_attempt(attempt_.number);
  current->set_state(status.state());
  current->set_reason(status.reason());
  current->set_resumed_from_step(attempt_.resume ? attempt_.resume->step() : 0);
  current->set_last_step(status.step());
  current->set_started_unix_ms(started_unix_ms_);
  return status;
}

void JobHandler::set_controller_address(const std::string& address) {
  std::lock_guard<std::mutex> lock(mutex_);
  info_.controller_address = address;
}

}  // namespace dslaunch::controller
