#include "launcher/controller/timing.h"
#include "launcher/controller/job_controller.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/atomic_file.h"
#include "core/host_name.h"
#include "core/json_input.h"
#include "core/layout/model_config.h"
#include "core/logging.h"
#include "core/spec/terminal_text.h"
#include "core/spec/training_support.h"
#include "launcher/controller/checkpoint_catalog.h"
#include "launcher/controller/checkpoint_committer.h"
#include "launcher/controller/clock.h"
#include "launcher/controller/controller_endpoint.h"
#include "launcher/controller/controller_server.h"
#include "launcher/controller/directory_lock.h"
#include "launcher/controller/job_directory.h"
#include "launcher/controller/job_handler.h"
#include "launcher/controller/job_state.h"
#include "launcher/controller/job_status.h"
#include "launcher/controller/metrics_endpoint.h"
#include "launcher/controller/prometheus_text.h"
#include "launcher/controller/training_monitors.h"
#include "launcher/plan/planned_job.h"
#include "launcher/runner/exported_environment.h"
#include "launcher/runner/failure_report.h"
#include "launcher/runner/host_probe.h"
#include "launcher/runner/launch_command.h"
#include "launcher/runner/rank_output.h"
#include "launcher/runner/supervised_process.h"
#include "launcher/worker_binary.h"
#include "proto/auth.h"
#include "proto/rank_certificates.h"

namespace dslaunch::controller {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Interrupts received (SIGINT, SIGTERM), and SIGUSR1 (Slurm's warning
// before the time limit, to the batch shell with --signal=B:USR1@N). A
// signal handler can only reach a global; the loop reads it.
std::atomic<int> g_interrupts{0};
std::atomic<bool> g_requeue_signal{false};

void count_interrupt(int) { g_interrupts.fetch_add(1); }
void note_requeue_signal(int) { g_requeue_signal.store(true); }

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = count_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  action.sa_handler = note_requeue_signal;
  sigaction(SIGUSR1, &action, nullptr);
}

// Inside a Slurm batch job, after a stop on SIGUSR1: puts the job back in
// the queue (scontrol requeue), whose next start resumes from the
// checkpoint just written. Says what happened either way.
void requeue_slurm_job(int64_t checkpoint_step) {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job == nullptr || *job == '\0') {
    spdlog::warn(
        "stopped on SIGUSR1 outside a Slurm job: nothing to requeue; `dslaunch resume` "
        "continues it");
    return;
  }
  const std::string command = fmt::format("scontrol requeue {} 2>&1", job);
  spdlog::info("stopped on SIGUSR1 after the checkpoint of step {}; requeueing Slurm job {}",
               checkpoint_step, job);
  if (const int status = std::system(command.c_str()); status != 0) {
    spdlog::error(
        "`scontrol requeue {}` failed (status {}); the job is stopped and resumable (sbatch it "
        "again with the same --job-dir)",
        job, status);
  }
}

int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// This process's environment as NAME=VALUE entries.
std::vector<std::string> environment_entries() {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) entries.emplace_back(*entry);
  return entries;
}

// A port free on this host now (the OS picks it), for MASTER_PORT.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

std::vector<v1::RankPlacement> placements(const plan::JobPlan& plan) {
  std::vector<v1::RankPlacement> out;
  for (const topology::RankPlacement& rank : plan.placement.ranks) {
    v1::RankPlacement placement;
    placement.set_rank(rank.rank);
    placement.set_world_size(plan.world_size());
    placement.set_local_rank(rank.local_rank);
    placement.set_local_world_size(rank.local_world_size);
    placement.set_host(rank.host);
    placement.set_slot(rank.slot);
    placement.set_pipeline(rank.coord.pipeline);
    placement.set_data(rank.coord.data);
    placement.set_tensor(rank.coord.tensor);
    placement.set_device(rank.device);
    for (const int core : rank.cpu_cores) placement.add_cpu_cores(core);
    out.push_back(placement);
  }
  return out;
}

// What every attempt of one run shares: the job's secret, the variables the
// launcher forwards to its ranks, and with mutual TLS the job's certificate
// authority.
struct RunSecrets {
  std::string token;
  std::map<std::string, std::string> exported;
  std::shared_ptr<const proto::JobCertificateAuthority> rank_certificates;
};

// What every attempt of one run reports to besides the job directory:
// DeepSpeed's tensorboard and csv_monitor, and the Prometheus endpoint.
struct RunMonitors {
  std::optional<TrainingMonitors> writers;
  std::unique_ptr<MetricsEndpoint> endpoint;
  std::mutex mutex;                   // guards the members below
  nlohmann::json last_step;           // rank 0's last step line
  bool write_failure_reported = false;
  // The running attempt's status; unset between attempts, when the last
  // one's stands.
  std::function<v1::JobStatus()> status_now;
  v1::JobStatus last_status;

  // Rank 0's step lines (called by the handler with each metrics line).
  void on_metrics(const nlohmann::json& line) {
    if (line.contains("what") || line.value("rank", -1) != 0) return;
    std::lock_guard lock(mutex);
    last_step = line;
    if (!writers) return;
    if (core::Status status = writers->on_step(line); !status.ok() && !write_failure_reported) {
      write_failure_reported = true;
      spdlog::warn("the training monitors stopped: {}", status.message());
    }
  }
  // The endpoint's answer: the status now.
  std::string render() {
    std::lock_guard lock(mutex);
    if (status_now) last_status = status_now();
    return prometheus_text(last_status, last_step);
  }
  // The endpoint's thread renders under `mutex`: it stops before the rest goes.
  ~RunMonitors() { endpoint.reset(); }

  void follow(std::function<v1::JobStatus()> source) {
    std::lock_guard lock(mutex);
    if (!source && status_now) last_status = status_now();
    status_now = std::move(source);
  }
};

// Everything one attempt owns while it runs.
class Attempt {
 public:
  Attempt(const RunOptions& options, const spec::JobSpec& spec, const plan::JobPlan& plan,
          JobDirectory& directory, const RunSecrets& secrets, const JobInfo& info,
          JobHandler::Attempt setup, RunMonitors& monitors)
      : options_(options),
        secrets_(secrets),
        monitors_(monitors),
        spec_(spec),
        plan_(plan),
        directory_(directory),
        info_(info),
        number_(setup.number),
        state_(plan.world_size(), timeouts(spec), clock_),
        handler_(info, with_spec(std::move(setup)), state_, directory, clock_),
        progress_(options.progress, stdout) {
    monitors_.follow([this] { return handler_.status_now(); });
  }
  ~Attempt() { monitors_.follow({}); }

  // How this attempt ended, once run() returned.
  v1::AttemptSummary summary() const {
    const v1::JobStatus status = handler_.status_now();
    return status.attempts(status.attempts_size() - 1);
  }
  int64_t last_checkpoint_step() const { return handler_.status_now().last_checkpoint_step(); }
  bool interrupted() const { return state_.stop_requested(); }
  // The hosts that stopped answering, after a failed multi-host attempt.
  const std::vector<std::string>& lost_hosts() const { return lost_hosts_; }
  // Stopped on SIGUSR1, to this process or to a rank: to be requeued.
  bool requeue_asked() const { return requeue_signal_seen_ || handler_.requeue_asked(); }

  int run() {
    ControllerServerOptions server_options;
    server_options.token = secrets_.token;
    if (spec_.cluster.tls.enabled()) {
      // The token authenticates the ranks; TLS keeps it and the traffic
      // private and proves the controller's identity to them.
      server_options.tls = ServerTls{spec_.cluster.tls.cert, spec_.cluster.tls.key, ""};
      // Each rank then proves its rank with a certificate this job issues.
      server_options.rank_certificates = secrets_.rank_certificates;
      server_options.attempt = number_;
      server_options.world_size = plan_.world_size();
    }
    ControllerServer server(handler_, server_options);
    const ControllerEndpoint endpoint = choose_controller_endpoint(
        spec_.cluster.controller_address, spec_.cluster.network_interface, plan_.all_hosts_local,
        local_ipv4_addresses());
    if (!endpoint.ok()) {
      // A setting to fix: no restart could cure it.
      fail_before_launch(server, endpoint.error);
      return kRunBadInput;
    }
    const StartResult started = server.start(endpoint.bind);
    if (!started.ok())
      return fail_before_launch(server, "cannot start the controller: " + started.error);
    info_.controller_address = fmt::format("{}:{}", endpoint.dial_host, started.port);
    handler_.set_controller_address(info_.controller_address);
    handler_.record_event(-1, "controller_started", info_.controller_address);

    state_.start();
    write_state();
    const std::string worker = launcher::find_worker_binary(options_.worker_binary);
    if (worker.empty()) {
      return fail_before_launch(server,
                                "cannot find dsworker beside dslaunch; set DSLAUNCH_WORKER");
    }
    runner::LaunchInputs inputs;
    inputs.worker_binary = worker;
    inputs.worker_args = {"run"};
    std::string error;
    inputs.attempt_dir =
        fs::path(directory_.rank_log_path(number_, 0, "stdout", error)).parent_path().parent_path();
    inputs.job_id = info_.job_id;
    inputs.job_token = secrets_.token;
    inputs.restart_count = number_;
    inputs.controller_address = info_.controller_address;
    const std::string& rank0_host = plan_.placement.ranks.front().host;
    inputs.master_address = !spec_.cluster.master_addr.empty() ? spec_.cluster.master_addr
                            : rank0_host == "localhost"        ? "127.0.0.1"
                                                               : rank0_host;
    inputs.master_port =
        spec_.cluster.master_port > 0 ? spec_.cluster.master_port : free_port();
    inputs.running_as_root = geteuid() == 0;
    inputs.local_cores = static_cast<int>(std::thread::hardware_concurrency());
    inputs.exported_environment = secrets_.exported;
    const runner::LaunchCommand command = runner::build_launch_command(spec_, plan_, inputs);
    for (const auto& [path, contents] : command.files) {
      if (!core::write_file_atomically(path, contents, error, 0600)) {
        return fail_before_launch(server, error);
      }
    }
    handler_.record_event(-1, "launching", fmt::format("{}", fmt::join(command.argv, " ")));
    // Every rank's log files exist from the start, empty until it writes.
    for (int rank = 0; rank < plan_.world_size(); ++rank) {
      for (const char* stream : {"stdout", "stderr"}) {
        const std::string path = directory_.rank_log_path(number_, rank, stream, error);
        if (path.empty() || !std::ofstream(path, std::ios::app)) {
          return fail_before_launch(
              server, path.empty() ? error : fmt::format("cannot create the log '{}'", path));
        }
      }
    }
    process_ = runner::SupervisedProcess::start(command.argv, command.environment, error);
    if (!process_) return fail_before_launch(server, error);
    launched_ = clock_.now();
    handler_.record_event(-1, "launcher_started", fmt::format("pid {}", process_->pid()));

    const runner::OutputTags tags = spec_.cluster.runner == spec::Runner::kSlurm
                                        ? runner::OutputTags::kSrun
                                        : runner::OutputTags::kMpirun;
    runner::FailureReportReader reports;
    runner::RankOutput output(
        tags,
        [this, attempt_dir = inputs.attempt_dir](int rank, runner::OutputStream stream) {
          const char* name = stream == runner::OutputStream::kStdout ? "stdout" : "stderr";
          std::string ignored;
          return rank < 0 ? fmt::format("{}/launcher.{}.log", attempt_dir, name)
                          : directory_.rank_log_path(number_, rank, name, ignored);
        },
        20,
        [&](std::string_view line) {
          if (auto failure = reports.read_line(line)) launcher_failures_.push_back(*failure);
        });
    watch(output);
    finish(server, output);
    return exit_code();
  }

 private:
  static FailureTimeouts timeouts(const spec::JobSpec& spec) {
    FailureTimeouts timeouts;
    timeouts.heartbeat_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(spec.fault_tolerance.heartbeat_timeout_s * 1000));
    // Writing a checkpoint may take far longer than a step.
    timeouts.checkpoint_timeout = 10 * timeouts.heartbeat_timeout;
    timeouts.step_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(spec.fault_tolerance.step_timeout_s * 1000));
    return timeouts;
  }

  JobHandler::Attempt with_spec(JobHandler::Attempt attempt) const {
    attempt.heartbeat_interval_ms =
        static_cast<int>(spec_.fault_tolerance.heartbeat_interval_s * 1000);
    attempt.resolved_spec_yaml = spec_.resolved_yaml;
    attempt.placements = placements(plan_);
    const topology::GridShape& shape = plan_.grid.shape();
    attempt.grid.set_pipeline(shape.pipeline);
    attempt.grid.set_data(shape.data);
    attempt.grid.set_tensor(shape.tensor);
    attempt.batch.set_train_batch_size(plan_.batch.train_batch_size);
    attempt.batch.set_micro_batch_per_gpu(plan_.batch.micro_batch_per_gpu);
    attempt.batch.set_gradient_accumulation_steps(plan_.batch.gradient_accumulation_steps);
    return attempt;
  }

  int fail_before_launch(ControllerServer& server, const std::string& reason) {
    state_.mark_failed(reason);
    handler_.record_event(-1, "failed", reason);
    server.shutdown(timing::kServerShutdownBeforeLaunch);
    write_state();
    spdlog::error("{}", reason);
    return kRunFailed;
  }

  void write_state() {
    std::string error;
    if (!directory_.write_state(status_to_json(handler_.status_now()), error)) {
      spdlog::error("{}", error);
    }
  }

  // Rank exits the launcher reported, applied once each.
  void apply_launcher_failures(runner::RankOutput& output) {
    for (; applied_failures_ < launcher_failures_.size(); ++applied_failures_) {
      const runner::LauncherFailure& failure = launcher_failures_[applied_failures_];
      std::string tail;
      for (const std::string& line : output.stderr_tail(failure.rank)) tail += line + "\n";
      state_.on_rank_exit(failure.rank, failure.exit_code, failure.signal, tail);
    }
  }

  // The loop: output, exits, heartbeats, stop requests, progress.
  // A graceful stop has no deadline of its own: the ranks finish a step,
  // evaluate and write a checkpoint, which for a large model takes minutes,
  // and the watch goes on until they exit. The failure detectors still
  // apply meanwhile (heartbeat, step, checkpoint and collective timeouts),
  // and a second interrupt or `dslaunch stop --now` ends the job at once.
  void watch(runner::RankOutput& output) {
    auto next_state_write = clock_.now();
    int interrupts_seen = 0;
    while (true) {
      process_->pump_output(output, timing::kOutputPoll);
      apply_launcher_failures(output);
      const int interrupts = g_interrupts.load();
      if (interrupts > interrupts_seen) {
        interrupts_seen = interrupts;
        if (interrupts == 1 && !handler_.stop_now_requested()) {
          spdlog::warn("stopping the job (interrupt again to kill it now)");
          handler_.request_graceful_stop();
        } else {
          state_.request_stop();
          handler_.record_event(-1, "stop_requested", "second interrupt: now");
          break;
        }
      }
      if (g_requeue_signal.load() && !requeue_signal_seen_) {
        requeue_signal_seen_ = true;
        spdlog::warn("SIGUSR1: checkpointing and stopping, to be requeued");
        handler_.request_graceful_stop();
      }
      if (handler_.stop_now_requested()) break;
      for (const int rank : state_.check_heartbeats()) {
        handler_.record_event(rank, "lost", "no heartbeat within the timeout");
      }
      if (const auto rank = state_.check_step_progress()) {
        handler_.record_event(*rank, "stalled", "no step progress within step_timeout");
      }
      if (state_.phase() == JobPhase::kStarting &&
          clock_.now() - launched_ > options_.registration_timeout) {
        state_.mark_failed(fmt::format(
            "not every rank registered within {}s of the start; see the logs of this attempt",
            std::chrono::duration_cast<std::chrono::seconds>(options_.registration_timeout)
                .count()));
      }
      if (state_.phase() == JobPhase::kFailed) {
        record_failure_detected();
        collect_stacks_if_hung(output);
        break;
      }
      if (const auto exited = process_->poll_exit()) {
        drain(output);
        apply_launcher_failures(output);
        settle_exit(*exited);
        break;
      }
      if (clock_.now() >= next_state_write) {
        write_state();
        progress_.update(handler_.status_now(), std::chrono::steady_clock::now());
        next_state_write = clock_.now() + timing::kStateWriteInterval;
      }
    }
  }

  // A hung rank usually leaves the others blocked in a collective with it:
  // their stacks (recorded as "stacks" events) show where, before they are
  // killed.
  void collect_stacks_if_hung(runner::RankOutput& output) {
    const auto cause = state_.root_cause();
    if (!cause || !cause->hung) return;
    v1::ControllerCommand dump;
    dump.set_kind(v1::ControllerCommand::KIND_DUMP_STACKS);
    if (handler_.broadcast(dump) == 0) return;
    const auto until = std::chrono::steady_clock::now() + timing::kStackCollection;
    while (std::chrono::steady_clock::now() < until) process_->pump_output(output, timing::kOutputPoll);
  }

  // Reads what the launcher and its ranks still had to say.
  void drain(runner::RankOutput& output) {
    const auto until = std::chrono::steady_clock::now() + timing::kOutputDrain;
    while (std::chrono::steady_clock::now() < until &&
           process_->pump_output(output, timing::kOutputDrainPoll)) {
    }
    output.finish();
  }

  // The launcher ended on its own: decide what that means for the job.
  void settle_exit(const runner::ExitStatus& exited) {
    handler_.record_event(-1, "launcher_exited", exited.to_string());
    if (is_final(state_.phase())) return;
    if (exited.code == 0 && handler_.sessions_lost().empty()) {
      for (const RankRecord& rank : state_.ranks())
        state_.on_rank_exit(rank.rank, 0, std::nullopt, "");
      if (!is_final(state_.phase())) {
        state_.mark_failed("the launcher exited 0, but not every rank registered and finished");
      }
      return;
    }
    const std::vector<int> lost = handler_.sessions_lost();
    state_.mark_failed(
        lost.empty()
            ? fmt::format("the launcher ended with {} before the ranks finished",
                          exited.to_string())
            : fmt::format("rank {} ended its session unexpectedly; the launcher ended with {}",
                          lost.front(), exited.to_string()));
  }

  // A failed attempt of ranks on other hosts: were some of those hosts lost?
  // Asked before the teardown, which waits on them in vain.
  void find_lost_hosts() {
    if (state_.phase() != JobPhase::kFailed || plan_.all_hosts_local ||
        spec_.cluster.runner != spec::Runner::kOpenMpi) {
      return;
    }
    std::vector<std::string> hosts;
    for (const topology::HostSlots& host : plan_.hosts) hosts.push_back(host.host);
    std::vector<std::pair<std::string, std::string>> lost;
    for (const runner::HostProbe& probe :
         runner::probe_hosts_over_ssh(hosts, spec_.cluster.ssh_port, timing::kHostProbeTimeout)) {
      if (probe.reachable) continue;
      lost.emplace_back(probe.host, probe.detail);
      lost_hosts_.push_back(probe.host);
      handler_.record_event(-1, "host_lost", fmt::format("{}: {}", probe.host, probe.detail));
    }
    handler_.record_event(
        -1, "hosts_probed",
        fmt::format("{} of {} answered", hosts.size() - lost.size(), hosts.size()));
    if (!lost.empty()) state_.blame_lost_hosts(std::move(lost));
  }

  // The moment the attempt's failure is known, as an event (once).
  void record_failure_detected() {
    if (failure_recorded_) return;
    if (const auto cause = state_.root_cause()) {
      handler_.record_event(-1, "failure_detected", cause->to_string());
      failure_recorded_ = true;
    }
  }

  void finish(ControllerServer& server, runner::RankOutput& output) {
    record_failure_detected();
    find_lost_hosts();
    if (!process_->poll_exit()) {
      handler_.record_event(-1, "terminating", "SIGTERM to the launcher, then SIGKILL");
      const runner::ExitStatus exited = process_->terminate(options_.termination_grace);
      drain(output);
      apply_launcher_failures(output);
      handler_.record_event(-1, "launcher_exited", exited.to_string());
    }
    if (!is_final(state_.phase())) {
      if (state_.stop_requested()) {
        state_.mark_stopped();
      } else {
        state_.mark_failed("the job ended without every rank finishing");
      }
    }
    server.shutdown(timing::kServerShutdownAfterJob);
    progress_.finish();
    const v1::JobStatus status = handler_.status_now();
    handler_.record_event(-1, "finished",
                          status.state() + (status.reason().empty() ? "" : ": " + status.reason()));
    write_state();
    // With restarts, say which attempt ended: a failed one may not end the job.
    const bool restartable = spec_.kind == spec::JobKind::kTrain &&
                             (number_ > 0 || spec_.fault_tolerance.max_restarts > 0);
    spdlog::log(status.state() == "SUCCEEDED" || status.state() == "STOPPED"
                    ? spdlog::level::info
                    : spdlog::level::err,
                "job {}{} {}{}; job directory {}", info_.job_id,
                restartable ? fmt::format(" attempt {}", number_) : "", status.state(),
                status.reason().empty() ? "" : ": " + status.reason(), directory_.path());
  }

  int exit_code() const {
    switch (state_.phase()) {
      case JobPhase::kSucceeded:
        return kRunSucceeded;
      case JobPhase::kStopped:
        return kRunStopped;
      default:
        return kRunFailed;
    }
  }

  const RunOptions& options_;
  const RunSecrets& secrets_;
  RunMonitors& monitors_;
  std::vector<std::string> lost_hosts_;
  bool failure_recorded_ = false;
  bool requeue_signal_seen_ = false;
  const spec::JobSpec& spec_;
  const plan::JobPlan& plan_;
  JobDirectory& directory_;
  JobInfo info_;
  const int number_;
  SteadyClock clock_;
  JobState state_;
  JobHandler handler_;
  ProgressDisplay progress_;
  std::unique_ptr<runner::SupervisedProcess> process_;
  Clock::TimePoint launched_{};
  std::vector<runner::LauncherFailure> launcher_failures_;
  size_t applied_failures_ = 0;
};

// The attempts an earlier `dslaunch run` of this job directory made (a
// resumed job), from its state.json; none for a new job.
std::vector<v1::AttemptSummary> earlier_attempts(const JobDirectory& directory) {
  std::string error;
  const std::optional<nlohmann::json> state = directory.read_state(error);
  if (!state) {
    // A new job has none; a damaged one costs only the attempts' history.
    if (fs::exists(fs::path(directory.path()) / "state.json")) {
      spdlog::warn("the earlier attempts are not known: {}", error);
    }
    return {};
  }
  const v1::JobStatus status = status_from_json(*state);
  std::vector<v1::AttemptSummary> attempts(status.attempts().begin(), status.attempts().end());
  // An attempt state.json still shows running lost its controller (dslaunch
  // killed, the machine rebooted): it failed.
  for (v1::AttemptSummary& attempt : attempts) {
    if (attempt.state() == "RUNNING" || attempt.state() == "STARTING" ||
        attempt.state() == "PENDING") {
      attempt.set_state("FAILED");
      attempt.set_reason("its controller (dslaunch) ended without a word: killed, or its host "
                         "went down");
    }
  }
  return attempts;
}

// The newest checkpoint under `root` whose manifest and shards check out
// (every checksum read), as the ranks receive it. Newer broken ones are
// skipped with a line each on stderr and in events.jsonl, and moved out of
// the way of the steps trained again: a committed one that went bad is
// renamed <dir>.broken (kept, never pruned), a save that never completed is
// removed. `error` is set, and nothing is touched, when the checkpoints
// cannot even be listed or a newer one cannot be judged (a newer format, an
// unreadable manifest).
std::optional<v1::ResumePoint> choose_resume_point(const std::string& root,
                                                   JobDirectory& directory, std::string& error) {
  const NewestValid newest = find_newest_valid(root);
  if (!newest.error.empty()) {
    error = fmt::format("cannot resume from {}: {}; nothing there was changed", root,
                        newest.error);
    return std::nullopt;
  }
  std::string ignored;
  for (const CheckpointCheck& skipped : newest.skipped) {
    std::string detail = skipped.problem;
    std::string moved_error;
    // Only a save that never committed may go; committed data is kept.
    if (skipped.verdict != CheckpointVerdict::kNeverCommitted) {
      const std::string aside = set_aside_checkpoint(skipped.dir, moved_error);
      detail += aside.empty() ? "; " + moved_error : "; moved to " + aside;
    } else {
      std::error_code removed;
      fs::remove_all(skipped.dir, removed);
      detail += removed ? "; cannot remove it: " + removed.message() : "; removed";
    }
    spdlog::warn("skipping a checkpoint: {}", spec::terminal_safe(detail));
    directory.append_event(-1, "checkpoint_skipped", detail, ignored);
  }
  if (!newest.found) return std::nullopt;
  const CheckpointManifest& manifest = *newest.found->manifest;
  v1::ResumePoint resume;
  resume.set_directory(newest.found->dir);
  resume.set_step(manifest.step);
  resume.set_samples_seen(manifest.samples_seen);
  for (const ShardRecord& record : manifest.shards) {
    v1::CheckpointShard* shard = resume.add_shards();
    shard->set_path(record.path);
    shard->set_size_bytes(record.size_bytes);
    shard->set_xxh64(record.xxh64);
    shard->set_begin(record.begin);
    shard->set_end(record.end);
    shard->set_total_parameters(record.slice_parameters);
    shard->set_model_parameters(manifest.total_parameters);
    shard->set_tensor_rank(record.tensor_rank);
    shard->set_stage(record.stage);
  }
  return resume;
}

// The model's shape as manifests record it.
nlohmann::json model_description(const spec::JobSpec& spec) {
  const core::Gpt2Config model = core::model_config(spec.model, 1);
  return {{"architecture", "gpt2"},
          {"num_layers", model.num_layers},
          {"hidden_size", model.channels},
          {"num_attention_heads", model.num_heads},
          {"vocab_size", model.vocab_size},
          {"padded_vocab_size", model.padded_vocab_size},
          {"seq_length", model.max_seq_len}};
}

// Checkpoints under `root` of another model than the spec's cannot be
// resumed: "" when there are none or the newest committed one holds the
// spec's model. A committed checkpoint this dslaunch cannot judge (a newer
// format, an unreadable manifest) is a problem too: running would skip it.
std::string foreign_checkpoint_problem(const spec::JobSpec& spec, const std::string& root) {
  const nlohmann::json ours = model_description(spec);
  for (const CheckpointCheck& check : list_checkpoints(root, false)) {
    if (check.verdict == CheckpointVerdict::kNeverCommitted) continue;
    if (check.verdict == CheckpointVerdict::kUnusable) {
      return fmt::format("{}: {}; nothing there was changed", root, check.problem);
    }
    // A damaged manifest that still names its model is judged by it.
    if (check.recorded_model.is_null()) continue;
    if (check.recorded_model == ours) return "";
    return fmt::format(
        "{} holds checkpoints of another model ({}) than this spec's ({}); resume with the "
        "model they hold, or start afresh with another --job-dir or checkpoint.dir",
        check.dir, core::json_excerpt(check.recorded_model), ours.dump());
  }
  return "";
}

// What every manifest of this job records besides the step's own fields.
CheckpointCommitter::Settings checkpoint_settings(const spec::JobSpec& spec,
                                                  const plan::JobPlan& plan,
                                                  const JobDirectory& directory,
                                                  const std::string& job_id, int attempt) {
  CheckpointCommitter::Settings settings;
  settings.root = spec.checkpoint.dir.empty()
                      ? (fs::path(directory.path()) / "checkpoints").string()
                      : spec.checkpoint.dir;
  settings.keep = spec.checkpoint.keep;
  settings.resolved_spec_yaml = spec.resolved_yaml;
  settings.ranks = plan.world_size();
  const int64_t global_batch = plan.batch.train_batch_size;
  settings.samples_per_step = global_batch;
  settings.tokens_per_step = global_batch * spec.model.seq_length;
  CheckpointManifest& base = settings.base;
  base.job_id = job_id;
  base.spec_hash = spec_hash(spec.resolved_yaml);
  base.attempt = attempt;
  base.data_parallel = plan.grid.shape().data;
  base.tensor_parallel = plan.grid.shape().tensor;
  base.pipeline_parallel = plan.grid.shape().pipeline;
  base.zero_stage = spec.training.zero.stage;
  // Sample g of the run is window permutation(seed, epoch)(g): the number of
  // samples consumed is the whole position in the data.
  base.data_positions = {{"seed", spec.training.seed}, {"global_batch", global_batch}};
  // Without dropout nothing draws random numbers after initialisation.
  base.rng_states = {{"init_seed", spec.model.init_seed}, {"data_seed", spec.training.seed}};
  // DeepSpeed's scheduler state is its last step, which the manifest's step is.
  constexpr const char* kSchedulerNames[] = {"none", "WarmupLR", "WarmupDecayLR",
                                             "WarmupCosineLR"};
  base.scheduler = {{"type", kSchedulerNames[static_cast<int>(spec.training.scheduler.type)]}};
  base.loss_scaler = {{"enabled", false}};  // fp32 training scales no loss
  base.model = model_description(spec);
  return settings;
}

// The ranks and stages `plan` gives the job.
void describe_plan(const plan::JobPlan& plan, JobInfo& info) {
  info.world_size = plan.world_size();
  info.stage_of_rank.clear();
  for (int rank = 0; rank < plan.world_size(); ++rank) {
    info.stage_of_rank.push_back(plan.grid.coord_of(rank).pipeline);
  }
}

std::string joined_hosts(const std::vector<std::string>& hosts) {
  return fmt::format("{}", fmt::join(hosts, ", "));
}

// The job planned again on the hosts of `plan` but `lost` (their slots as
// selected before), with what the spec says of batch sizes for the new
// world (elasticity); nullopt, with every problem printed, when it cannot be.
std::optional<plan::PlannedJob> replan_without(const RunOptions& options, const plan::JobPlan& plan,
                                               const std::vector<std::string>& lost) {
  std::vector<std::string> kept;
  for (const topology::HostSlots& host : plan.hosts) {
    if (std::find(lost.begin(), lost.end(), host.host) != lost.end()) continue;
    kept.push_back(fmt::format("{}:{}", host.host, fmt::join(host.slots, ",")));
  }
  if (kept.empty()) {
    spdlog::error("every host of the job is lost ({})", joined_hosts(lost));
    return std::nullopt;
  }
  spec::LoadOptions load = options.load;
  load.include = fmt::format("{}", fmt::join(kept, "@"));
  load.exclude.clear();
  spec::Diagnostics diagnostics;
  std::optional<plan::PlannedJob> planned =
      plan::load_and_plan(options.spec_path, load, diagnostics);
  if (!planned) {
    spdlog::error("cannot go on without {}:\n{}", joined_hosts(lost), diagnostics.format());
  }
  return planned;
}

// Without elasticity a lost host is waited for, up to
// fault_tolerance.host_wait_timeout: true once every one answers again,
// false (said why) when the time is up or the job is interrupted.
bool wait_for_hosts(const spec::JobSpec& spec, const std::vector<std::string>& lost) {
  const auto limit = std::chrono::milliseconds(
      static_cast<int64_t>(spec.fault_tolerance.host_wait_timeout_s * 1000));
  spdlog::warn(
      "waiting up to {}s (fault_tolerance.host_wait_timeout) for {} to answer again; with "
      "training.elasticity the job would go on without it",
      std::chrono::duration_cast<std::chrono::seconds>(limit).count(), joined_hosts(lost));
  const auto start = std::chrono::steady_clock::now();
  while (g_interrupts.load() == 0) {
    bool all_back = true;
    for (const runner::HostProbe& probe :
         runner::probe_hosts_over_ssh(lost, spec.cluster.ssh_port, timing::kHostProbeTimeout)) {
      all_back = all_back && probe.reachable;
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (all_back) {
      spdlog::info("{} answer{} again after {}s", joined_hosts(lost), lost.size() > 1 ? "" : "s",
                   std::chrono::duration_cast<std::chrono::seconds>(waited).count());
      return true;
    }
    if (waited >= limit) break;
    std::this_thread::sleep_for(timing::kLostHostPoll);
  }
  if (g_interrupts.load() == 0) {
    spdlog::error(
        "{} did not answer within {}s; the job stops here. Resume it once the host is back "
        "(dslaunch resume), or run it again from the same job directory without the host "
        "(--exclude), or enable training.elasticity to go on without lost hosts",
        joined_hosts(lost), std::chrono::duration_cast<std::chrono::seconds>(limit).count());
  }
  return false;
}

// The first attempt and the automatic restarts: a failed attempt is
// followed, up to fault_tolerance.max_restarts times, by a new one from the
// newest valid checkpoint after a backoff of 1, 2, 4 ... 30 s. A stop, an
// interrupt or a success ends the job. When hosts were lost, the next
// attempt runs without them (training.elasticity: re-planned, batch sizes
// for the smaller world) or waits for them to answer again.
int run_attempts(const RunOptions& options, const plan::PlannedJob& first, JobDirectory& directory,
                 const RunSecrets& secrets, JobInfo info) {
  std::vector<v1::AttemptSummary> earlier = earlier_attempts(directory);
  int number = earlier.empty() ? 0 : earlier.back().attempt() + 1;
  RunMonitors monitors;
  if (first.spec.kind == spec::JobKind::kTrain) {
    core::StatusOr<TrainingMonitors> writers =
        TrainingMonitors::create(first.spec.training.monitor, directory.path(), first.spec.name);
    if (!writers.ok()) {
      spdlog::error("{}", writers.status().message());
      return kRunBadInput;
    }
    if (writers->enabled()) monitors.writers.emplace(std::move(*writers));
  }
  if (first.spec.cluster.metrics_port > 0) {
    std::string token;
    if (!first.spec.cluster.metrics_token_file.empty()) {
      core::StatusOr<std::string> read =
          MetricsEndpoint::read_token_file(first.spec.cluster.metrics_token_file);
      if (!read.ok()) {
        spdlog::error("{}", read.status().message());
        return kRunBadInput;
      }
      token = std::move(*read);
    }
    core::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint = MetricsEndpoint::start(
        first.spec.cluster.metrics_port, [&monitors] { return monitors.render(); }, token);
    if (!endpoint.ok()) {
      spdlog::error("{}", endpoint.status().message());
      return kRunBadInput;
    }
    monitors.endpoint = std::move(*endpoint);
    spdlog::info("metrics for Prometheus at http://{}:{}/metrics", core::host_name(),
                 monitors.endpoint->port());
  }
  std::optional<plan::PlannedJob> replanned;
  for (int restarts = 0;; ++restarts, ++number) {
    const spec::JobSpec& spec = replanned ? replanned->spec : first.spec;
    const plan::JobPlan& plan = replanned ? replanned->plan : first.plan;
    describe_plan(plan, info);
    JobHandler::Attempt setup;
    setup.number = number;
    setup.restarts = restarts;
    setup.earlier = earlier;
    if (spec.kind == spec::JobKind::kTrain) {
      setup.checkpoints = checkpoint_settings(spec, plan, directory, info.job_id, number);
      std::string error;
      setup.resume = choose_resume_point(setup.checkpoints->root, directory, error);
      if (!error.empty()) {
        // Starting from step 0 would throw the job's progress away.
        spdlog::error("{}", error);
        return kRunFailed;
      }
      if (setup.resume) {
        setup.last_checkpoint_step = setup.resume->step();
        setup.checkpoints->first_step = setup.resume->step();
        setup.checkpoints->samples_before = setup.resume->samples_seen();
        setup.checkpoints->tokens_before = setup.resume->samples_seen() * spec.model.seq_length;
        spdlog::info("attempt {}: resuming from the checkpoint of step {} ({})", number,
                     setup.resume->step(), setup.resume->directory());
      } else if (number > 0) {
        spdlog::info("attempt {}: no valid checkpoint in {}; starting from step 0", number,
                     setup.checkpoints->root);
      }
    }
    std::vector<std::string> lost;
    {
      setup.on_step_metrics = [&monitors](const nlohmann::json& line) {
        monitors.on_metrics(line);
      };
      Attempt attempt(options, spec, plan, directory, secrets, info, std::move(setup), monitors);
      const int code = attempt.run();
      earlier.push_back(attempt.summary());
      if (code == kRunStopped && attempt.requeue_asked()) {
        requeue_slurm_job(attempt.last_checkpoint_step());
      }
      if (code != kRunFailed || attempt.interrupted() || g_interrupts.load() > 0) return code;
      lost = attempt.lost_hosts();
    }
    if (restarts >= spec.fault_tolerance.max_restarts) {
      if (spec.fault_tolerance.max_restarts > 0) {
        spdlog::error("giving up after {} restart(s)", restarts);
      }
      return kRunFailed;
    }
    if (!lost.empty()) {
      if (spec.training.elasticity.enabled) {
        std::optional<plan::PlannedJob> without = replan_without(options, plan, lost);
        if (!without) return kRunFailed;
        const spec::BatchSizes& batch = without->plan.batch;
        spdlog::warn(
            "going on without {} (elasticity): {} rank(s) on {} host(s), train batch {} = "
            "micro-batch {} x accumulation {} x data-parallel {}",
            joined_hosts(lost), without->plan.world_size(), without->plan.hosts.size(),
            batch.train_batch_size, batch.micro_batch_per_gpu, batch.gradient_accumulation_steps,
            without->plan.grid.shape().data);
        replanned = std::move(without);
      } else if (!wait_for_hosts(spec, lost)) {
        return g_interrupts.load() > 0 ? kRunStopped : kRunFailed;
      }
    }
    const auto backoff = std::min<std::chrono::seconds>(timing::kMaxRestartBackoff,
                                                        std::chrono::seconds(1 << std::min(restarts, 5)));
    spdlog::error("attempt {} failed: {}; restart {} of {} in {}s", number,
                  earlier.back().reason(), restarts + 1, spec.fault_tolerance.max_restarts,
                  backoff.count());
    const auto until = std::chrono::steady_clock::now() + backoff;
    while (std::chrono::steady_clock::now() < until && g_interrupts.load() == 0) {
      std::this_thread::sleep_for(timing::kBackoffPoll);
    }
    if (g_interrupts.load() > 0) return kRunStopped;
  }
}

}  // namespace

int run_job(const RunOptions& options) {
  const core::StatusOr<spdlog::level::level_enum> log_level = core::log_level_from_environment();
  if (!log_level.ok()) {
    std::cerr << "dslaunch: " << spec::terminal_safe(log_level.status().message()) << "\n";
    return kRunBadInput;
  }
  spec::Diagnostics diagnostics;
  std::optional<plan::PlannedJob> planned =
      plan::load_and_plan(options.spec_path, options.load, diagnostics);
  if (!planned) {
    std::cerr << diagnostics.format();
    return kRunBadInput;
  }
  const spec::JobSpec& spec = planned->spec;
  const plan::JobPlan& job_plan = planned->plan;
  if (spec.kind == spec::JobKind::kTrain) {
    if (const std::string problem = spec::training_support_problem(spec);
        !problem.empty()) {
      std::cerr << spec::terminal_safe(fmt::format("{}: error: {}", options.spec_path, problem))
                << "\n";
      return kRunBadInput;
    }
  }
  if (spec.cluster.runner == spec::Runner::kLocal && !job_plan.all_hosts_local) {
    std::cerr << fmt::format(
        "{}: error: runner local starts ranks on this machine only, but the hosts include "
        "others; set cluster.runner to openmpi (mpirun over ssh) or slurm\n",
        options.spec_path);
    return kRunBadInput;
  }
  for (const std::string& warning : job_plan.warnings) {
    std::cerr << "dslaunch: warning: " << warning << "\n";
  }
  RunSecrets secrets;
  if (std::string env_error; !runner::exported_environment(
          environment_entries(),
          runner::deepspeed_env_files(std::getenv("HOME"), std::getenv("DS_ENV_FILE")),
          secrets.exported, env_error)) {
    std::cerr << "dslaunch: " << spec::terminal_safe(env_error) << "\n";
    return kRunBadInput;
  }

  std::string error;
  const std::string job_id = options.job_dir.empty()
                                 ? new_job_id(spec.name)
                                 : fs::path(options.job_dir).filename().string();
  const std::string root = options.job_dir.empty()
                               ? default_jobs_root()
                               : fs::absolute(options.job_dir).parent_path().string();
  // One controller per job directory and checkpoint folder, held until the
  // job ends; taken before anything in them is read or written.
  std::vector<DirectoryLock> locks;
  const std::string checkpoints = spec.checkpoint.dir.empty()
                                      ? (fs::path(root) / job_id / "checkpoints").string()
                                      : spec.checkpoint.dir;
  for (const std::string& dir : {(fs::path(root) / job_id).string(), checkpoints}) {
    if (spec.kind != spec::JobKind::kTrain && dir == checkpoints) continue;
    std::optional<DirectoryLock> lock = DirectoryLock::acquire(dir, error);
    if (!lock) {
      std::cerr << "dslaunch: " << spec::terminal_safe(error) << "\n";
      return kRunBadInput;
    }
    locks.push_back(std::move(*lock));
  }
  if (spec.kind == spec::JobKind::kTrain) {
    if (const std::string problem = foreign_checkpoint_problem(spec, checkpoints);
        !problem.empty()) {
      std::cerr << spec::terminal_safe(fmt::format("{}: error: {}", options.spec_path, problem))
                << "\n";
      return kRunBadInput;
    }
  }
  std::optional<JobDirectory> directory = JobDirectory::create(root, job_id, error);
  const proto::TokenResult token = proto::generate_token();
  if (!directory || !token.ok() || !directory->write_spec(spec.resolved_yaml, error) ||
      !directory->write_token(token.token, error)) {
    std::cerr << "dslaunch: " << (token.ok() ? error : token.error) << "\n";
    return kRunFailed;
  }
  secrets.token = token.token;
  // From here on the controller logs (with times and levels) to the
  // terminal and to logs/controller.log, which `dslaunch logs` shows.
  core::LogSetup log;
  log.source = "dslaunch";
  log.level = log_level.value();
  log.colour = true;
  log.clear_terminal_line = true;
  log.file = directory->controller_log_path(error);
  if (log.file.empty()) {
    std::cerr << "dslaunch: " << spec::terminal_safe(error) << "\n";
    return kRunFailed;
  }
  if (core::Status logging = core::install_logging(log); !logging.ok()) {
    std::cerr << "dslaunch: " << spec::terminal_safe(logging.message()) << "\n";
    return kRunFailed;
  }
  if (spec.cluster.tls.enabled() && spec.cluster.tls.client_certificates) {
    core::StatusOr<std::unique_ptr<proto::JobCertificateAuthority>> authority =
        proto::JobCertificateAuthority::create(job_id);
    if (!authority.ok()) {
      spdlog::error("{}", authority.status().message());
      return kRunFailed;
    }
    secrets.rank_certificates = std::move(*authority);
  }
  install_interrupt_handlers();

  JobInfo info;
  info.job_id = job_id;
  info.name = spec.name;
  info.kind = spec.kind == spec::JobKind::kCommbench ? "commbench" : "train";
  info.total_steps = spec.kind == spec::JobKind::kTrain ? spec.training.steps : 0;
  info.started_unix_ms = unix_time_ms();
  info.controller_pid = getpid();
  info.controller_host = core::host_name();
  info.tls_ca = spec.cluster.tls.ca;
  spdlog::info("job {}: {} rank(s) on {} host(s); job directory {}", job_id,
               job_plan.world_size(), job_plan.hosts.size(), directory->path());
  if (!job_plan.device_choice.empty()) {
    spdlog::info("cluster.device auto: {}", job_plan.device_choice);
  }
  return run_attempts(options, *planned, *directory, secrets, info);
}

}  // namespace dslaunch::controller
