#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/controller/checkpoint_committer.h"
#include "launcher/controller/controller_handler.h"
#include "launcher/controller/job_directory.h"
#include "launcher/controller/job_state.h"
#include "launcher/controller/job_status.h"

namespace dslaunch::controller {

// What the controller answers its ranks and CLI clients during one attempt:
// registrations (with the resolved spec and each rank's placement), session
// messages (heartbeats, errors, metrics, stacks) into the JobState and the
// job directory, status, and stop requests. Thread-safe (gRPC threads call
// it concurrently); the job directory is written under one lock.
class JobHandler final : public ControllerHandler {
 public:
  struct Attempt {
    int number = 0;  // DSL_RESTART_COUNT of the ranks it accepts
    int restarts = 0;
    int heartbeat_interval_ms = 5000;
    std::string resolved_spec_yaml;
    std::vector<v1::RankPlacement> placements;  // indexed by rank
    v1::GridShape grid;                         // the plan's
    v1::BatchSizes batch;
    // Training jobs: where checkpoints go and how they are committed.
    std::optional<CheckpointCommitter::Settings> checkpoints;
    // The checkpoint every rank starts from; unset: the beginning.
    std::optional<v1::ResumePoint> resume;
    int64_t last_checkpoint_step = 0;         // committed before this attempt
    std::vector<v1::AttemptSummary> earlier;  // the attempts before this one
    // Called with each metrics.jsonl line as it is appended (under the
    // handler's lock; it must not call the handler).
    std::function<void(const nlohmann::json&)> on_step_metrics;
  };

  // `state`, `directory` and `clock` must outlive the handler.
  JobHandler(JobInfo info, Attempt attempt, JobState& state, JobDirectory& directory,
             const Clock& clock);

  grpc::Status register_rank(const v1::RegisterRequest& request, v1::RegisterReply* reply) override;
  void session_opened(int rank, std::shared_ptr<CommandSink> sink) override;
  void worker_message(const v1::WorkerMessage& message) override;
  void session_closed(int rank) override;
  grpc::Status get_status(v1::JobStatus* status) override;
  grpc::Status stop(const v1::StopRequest& request, v1::StopReply* reply) override;
  grpc::Status checkpoint(const v1::CheckpointRequest& request,
                          v1::CheckpointReply* reply) override;

  // Sends `command` to every open session; returns how many took it.
  int broadcast(const v1::ControllerCommand& command);
  // `dslaunch stop --now` or a second interrupt: end the job at once.
  bool stop_now_requested() const { return stop_now_.load(); }
  // A rank stopped on SIGUSR1 (Slurm's warning before the time limit).
  bool requeue_asked() const { return requeue_asked_.load(); }
  // A graceful stop was asked for over gRPC (the controller forwards it).
  void request_graceful_stop();
  // Ranks whose session ended before they reported PHASE_FINISHED, in order.
  std::vector<int> sessions_lost() const;
  // Records an event in events.jsonl (also used by the controller loop).
  void record_event(int rank, const std::string& kind, const std::string& detail);
  v1::JobStatus status_now() const;
  // Known once the server is listening.
  void set_controller_address(const std::string& address);

 private:
  // Called with mutex_ held when events.jsonl or metrics.jsonl cannot be
  // appended to (a full disk): tells the user once.
  void report_write_failure(const std::string& error);
  // `rank`'s shard is durable; commits the checkpoint once every rank's is.
  // The commit's disk work (fsyncs, deleting old checkpoints) holds only
  // commit_mutex_, so status and commands are not held up by it.
  void shard_written(int rank, const v1::WorkerEvent& event);

  JobInfo info_;  // the controller address is set later, under mutex_
  const Attempt attempt_;
  JobState& state_;
  JobDirectory& directory_;
  const Clock& clock_;
  const int64_t started_unix_ms_;  // when this attempt began
  std::atomic<bool> stop_now_{false};
  std::atomic<bool> requeue_asked_{false};
  std::atomic<bool> write_failure_reported_{false};
  mutable std::mutex mutex_;  // guards the maps below and the job directory
  std::map<int, std::shared_ptr<CommandSink>> sinks_;
  std::vector<bool> finished_;
  std::vector<int> sessions_lost_;
  std::mutex commit_mutex_;  // guards committer_
  std::optional<CheckpointCommitter> committer_;
  int64_t last_checkpoint_step_ = 0;  // guarded by mutex_
};

}  // namespace dslaunch::controller
