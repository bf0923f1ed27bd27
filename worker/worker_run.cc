#include "worker/worker_run.h"
#include "worker/timing.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/logging.h"
#include "core/spec/spec_parser.h"
#include "core/status.h"
#include "proto/controller_client.h"
#include "proto/rank_certificates.h"
#include "tools/build_info/build_info.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/commbench/commbench.h"
#include "worker/fault_injection.h"
#include "worker/process_memory.h"
#include "worker/rank_environment.h"
#include "worker/secret_variable.h"
#include "worker/stack_dump.h"
#include "worker/train_workload.h"

namespace dslaunch::worker {
namespace {

namespace v1 = dslaunch::v1;
using namespace std::chrono_literals;

constexpr int kDone = 0;
constexpr int kWorkloadFailed = 1;
constexpr int kUnusable = 2;
constexpr int kControllerLost = 3;

// What the session's threads and the workload share.
struct RankStatus {
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> checkpoint_requested{false};
  std::atomic<bool> stacks_requested{false};
  std::atomic<bool> finished{false};
  std::atomic<int64_t> step{0};
  std::atomic<int> phase{v1::PHASE_INIT};
  std::atomic<double> loss{0};
  std::atomic<double> tokens_per_s{0};
  std::atomic<double> step_time_s{0};
  std::atomic<double> pipeline_wait_s{0};
  std::atomic<int64_t> comm_bytes{0};
  std::atomic<double> compression_ratio{0};
  std::atomic<int64_t> parameter_bytes{0};
  std::atomic<int64_t> gradient_bytes{0};
  std::atomic<int64_t> optimizer_state_bytes{0};
  std::atomic<int64_t> activation_bytes{0};
  std::atomic<int64_t> communication_bytes{0};
  std::atomic<int64_t> gradient_workspace_peak_bytes{0};
  std::atomic<int64_t> parameter_workspace_peak_bytes{0};
  std::atomic<int64_t> weight_copy_bytes{0};
  std::atomic<int64_t> peak_device_bytes{0};
  // The communicators' transport while the process groups live; set and
  // cleared under the heartbeat mutex, read by the heartbeat thread under it.
  const comm::Transport* transport = nullptr;
};

// SIGTERM or SIGUSR1 received (as Slurm's --signal sends before the time
// limit): checkpoint after this step, then stop. A second one ends the rank
// at once. A signal handler can only reach a global.
std::atomic<int> g_stop_signal{0};
// Under mpirun, the process that tears the job down (mpirun or its orted,
// this rank's parent): its SIGTERM ends the rank at once, as the default
// action would, since a peer has failed or the job is being killed and
// waiting for a checkpoint only delays mpirun's SIGKILL. 0 under Slurm,
// whose slurmstepd sends both --signal's SIGTERM and the teardown's.
std::atomic<pid_t> g_teardown_sender{0};

void stop_on_signal(int signal, siginfo_t* info, void*) {
  const pid_t teardown = g_teardown_sender.load();
  if (signal == SIGTERM && teardown != 0 && info != nullptr && info->si_pid == teardown) {
    std::_Exit(128 + signal);
  }
  if (g_stop_signal.exchange(signal) != 0) std::_Exit(128 + signal);
}

// Training only: elsewhere SIGTERM keeps its default and ends the rank.
void install_stop_signal_handlers(spec::Runner runner) {
  g_teardown_sender.store(runner == spec::Runner::kSlurm ? 0 : getppid());
  struct sigaction action {};
  action.sa_sigaction = stop_on_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;  // other threads' blocking calls go on
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

// The checkpoint the controller chose to resume from, as the trainer reads it.
std::optional<engine::ResumePoint> resume_point(const v1::RegisterReply& reply) {
  if (!reply.has_resume() || reply.resume().directory().empty()) return std::nullopt;
  engine::ResumePoint resume;
  resume.step = reply.resume().step();
  resume.samples_seen = reply.resume().samples_seen();
  if (reply.resume().shards_size() > 0) {
    resume.total_parameters = reply.resume().shards(0).model_parameters();
  }
  for (const v1::CheckpointShard& shard : reply.resume().shards()) {
    resume.shards.push_back(
        {(std::filesystem::path(reply.resume().directory()) / shard.path()).string(), shard.begin(),
         shard.end()});
  }
  return resume;
}

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string host_name() {
  std::array<char, 256> name{};
  gethostname(name.data(), name.size() - 1);
  return name.data();
}

int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Registration, retried while the controller is not reachable yet (it
// starts before the ranks, but a busy host may delay it).
// Runs `call` until it answers anything but UNAVAILABLE (the controller
// may not listen yet), backing off between tries.
core::Status with_retries(const std::function<core::Status()>& call) {
  core::Status status;
  auto backoff =
      std::chrono::duration_cast<std::chrono::milliseconds>(timing::kRegisterFirstBackoff);
  for (int attempt = 0; attempt < timing::kRegisterAttempts; ++attempt) {
    status = call();
    if (status.code() != core::StatusCode::kUnavailable) return status;
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
  return status;
}

// Mutual TLS: a key made here and the certificate the controller issues
// for it, naming this rank and attempt, asked for over TLS that checks the
// controller; set in `tls` for every later call.
core::Status fetch_rank_certificate(const std::string& address, const std::string& token, int rank,
                                    int attempt, proto::ClientTls& tls) {
  core::StatusOr<proto::KeyAndRequest> made =
      proto::make_key_and_request(fmt::format("dslaunch rank {}", rank));
  if (!made.ok()) return made.status();
  proto::ClientOptions options;
  options.tls = tls;
  proto::ControllerClient client(address, token, options);
  v1::CertificateRequest request;
  request.set_rank(rank);
  request.set_restart_count(attempt);
  request.set_request_pem(made->request_pem);
  v1::CertificateReply reply;
  if (core::Status issued = with_retries([&] { return client.issue_certificate(request, &reply); });
      !issued.ok()) {
    return issued.with_context("asking the controller for this rank's certificate");
  }
  tls.cert_pem = reply.certificate_pem();
  tls.key_pem = std::move(made->private_key_pem);
  return {};
}

void bind_to_cores(const v1::RankPlacement& placement) {
  if (placement.cpu_cores_size() == 0) return;
  cpu_set_t cores;
  CPU_ZERO(&cores);
  for (const int core : placement.cpu_cores()) CPU_SET(core, &cores);
  if (sched_setaffinity(0, sizeof(cores), &cores) != 0) {
    spdlog::warn("cannot bind to the planned cores; running unbound");
  }
}

// Threads for the rank's kernels (see rank_environment.h).
int compute_threads(const v1::RankPlacement& placement) {
  return worker::compute_threads(std::getenv, placement.cpu_cores_size(),
                                 static_cast<int>(std::thread::hardware_concurrency()),
                                 placement.local_world_size());
}

void send_event(proto::Session& session, v1::WorkerEvent::Kind kind, const std::string& message) {
  v1::WorkerMessage out;
  out.mutable_event()->set_kind(kind);
  out.mutable_event()->set_message(message);
  session.send(out);
}

// What a heartbeat says: where the rank is, its last step's loss and
// speed, and its memory by kind.
void fill_heartbeat(const RankStatus& status, v1::Heartbeat& heartbeat) {
  heartbeat.set_step(status.step.load());
  heartbeat.set_phase(static_cast<v1::Phase>(status.phase.load()));
  heartbeat.set_unix_time_ms(unix_time_ms());
  heartbeat.set_loss(status.loss.load());
  heartbeat.set_tokens_per_s(status.tokens_per_s.load());
  heartbeat.set_step_time_s(status.step_time_s.load());
  heartbeat.set_comm_bytes(status.comm_bytes.load());
  heartbeat.set_compression_ratio(status.compression_ratio.load());
  heartbeat.set_pipeline_wait_s(status.pipeline_wait_s.load());
  v1::MemoryUsage* memory = heartbeat.mutable_memory();
  memory->set_parameters(status.parameter_bytes.load());
  memory->set_gradients(status.gradient_bytes.load());
  memory->set_optimizer_states(status.optimizer_state_bytes.load());
  memory->set_activations(status.activation_bytes.load());
  memory->set_communication_buffers(status.communication_bytes.load());
  memory->set_gradient_workspace_peak(status.gradient_workspace_peak_bytes.load());
  memory->set_parameter_workspace_peak(status.parameter_workspace_peak_bytes.load());
  memory->set_weight_copy(status.weight_copy_bytes.load());
  memory->set_peak_device_bytes(status.peak_device_bytes.load());
  memory->set_rss_bytes(resident_bytes());
  memory->set_peak_rss_bytes(peak_resident_bytes());
  if (status.transport != nullptr) {
    for (const comm::GroupProgress& group : status.transport->progress()) {
      v1::GroupProgress* out = heartbeat.add_collectives();
      out->set_group(group.group);
      out->set_started(group.started);
    }
  }
}

// Heartbeats at the controller's interval until the rank finishes, and
// answers stack-dump requests: gRPC's callback threads must not wait for a
// capture, so they only flag it and wake this thread.
void heartbeat_loop(proto::Session& session, RankStatus& status, std::chrono::milliseconds interval,
                    pthread_t workload_thread, std::mutex& mutex, std::condition_variable& wake) {
  std::unique_lock<std::mutex> lock(mutex);
  while (!status.finished.load()) {
    if (status.stacks_requested.exchange(false)) {
      v1::WorkerMessage stacks;
      stacks.mutable_event()->set_kind(v1::WorkerEvent::KIND_STACKS);
      stacks.mutable_event()->set_message(
          capture_stack(workload_thread, timing::kStackCaptureTimeout));
      session.send(stacks);
    }
    v1::WorkerMessage message;
    fill_heartbeat(status, *message.mutable_heartbeat());
    session.send(message);
    wake.wait_for(lock, interval,
                  [&] { return status.finished.load() || status.stacks_requested.load(); });
  }
}

// Maps the spec's commbench section onto the benchmark's options.
commbench::CommbenchOptions commbench_options(const spec::CommbenchSpec& spec, RankStatus& status) {
  commbench::CommbenchOptions options;
  options.collectives.clear();
  for (const std::string& name : spec.collectives) {
    if (const auto collective = commbench::parse_collective(name)) {
      options.collectives.push_back(*collective);
    }
  }
  options.groups.clear();
  for (const std::string& name : spec.groups) {
    if (const auto axis = comm::parse_axis(name)) options.groups.push_back(*axis);
  }
  options.min_bytes = spec.min_bytes;
  options.max_bytes = spec.max_bytes;
  options.iterations = spec.iterations;
  options.warmup = spec.warmup;
  options.stop_requested = [&status] { return status.stop_requested.load(); };
  return options;
}

// Runs the commbench on every rank; rank 0 prints the table and reports each
// result. Returns the exit code.
int run_commbench_workload(const spec::JobSpec& spec, const comm::ProcessGroups& groups,
                           proto::Session& session, RankStatus& status) {
  const bool reporter = groups.rank() == 0;
  status.communication_bytes.store(2 * spec.commbench.max_bytes);
  status.phase.store(v1::PHASE_TRAIN);
  if (reporter) spdlog::info("{}", commbench::format_header());
  int wrong = 0;
  std::string error;
  commbench::run_commbench(
      groups, commbench_options(spec.commbench, status),
      [&](const commbench::CommbenchResult& result) {
        status.step.fetch_add(1);
        if (!result.correct) ++wrong;
        if (!reporter) return;
        spdlog::info("{}", commbench::format_result(result));
        v1::WorkerMessage message;
        v1::WorkerEvent* event = message.mutable_event();
        event->set_kind(v1::WorkerEvent::KIND_STEP_METRICS);
        event->set_step(status.step.load());
        event->set_message(result.group + " " + result.collective);
        auto& metrics = *event->mutable_metrics();
        metrics["bytes"] = static_cast<double>(result.bytes);
        metrics["ranks"] = result.ranks;
        metrics["time_us"] = result.time_us;
        metrics["algbw_gbs"] = result.algbw_gbs;
        metrics["busbw_gbs"] = result.busbw_gbs;
        metrics["correct"] = result.correct ? 1 : 0;
        session.send(message);
      },
      error);
  if (!error.empty()) {
    send_event(session, v1::WorkerEvent::KIND_ERROR, "commbench: " + error);
    spdlog::error("commbench: {}", error);
    return kWorkloadFailed;
  }
  if (wrong > 0) {
    const std::string message =
        fmt::format("commbench: {} measurement(s) gave wrong results", wrong);
    send_event(session, v1::WorkerEvent::KIND_ERROR, message);
    spdlog::error("{}", message);
    return kWorkloadFailed;
  }
  return kDone;
}

}  // namespace

int run_worker() {
  // Taken out of the environment first, before anything (MPI, a workload's
  // helper, a debugger) can start a process that would inherit it.
  const std::string token = take_secret_variable("DSL_JOB_TOKEN");
  install_stack_dump_handler();
  core::LogSetup log;
  log.source = "dsworker";
  const auto level = core::log_level_from_environment();
  if (level.ok()) log.level = level.value();
  (void)core::install_logging(log);  // console only: cannot fail
  if (!level.ok()) spdlog::warn("{}; logging at info", level.status().message());
  std::string error;
  const auto rank_env =
      read_rank_environment([](const char* name) { return std::getenv(name); }, error);
  if (!rank_env) {
    spdlog::error("{}", error);
    return kUnusable;
  }
  log.source = fmt::format("rank {}", rank_env->rank);
  (void)core::install_logging(log);
  export_rank_environment(*rank_env);
  const std::string address = env_or_empty("DSL_CONTROLLER");
  if (address.empty() || token.empty()) {
    spdlog::error(
        "DSL_CONTROLLER or DSL_JOB_TOKEN is not set: dsworker run is started by `dslaunch run`");
    return kUnusable;
  }

  if (core::Status started = comm::mpi_init(); !started.ok()) {
    spdlog::error("{}", started.message());
    return kUnusable;
  }
  const int attempt = std::atoi(env_or_empty("DSL_RESTART_COUNT").c_str());
  proto::ClientOptions client_options;
  if (const std::string ca = env_or_empty("DSL_TLS_CA"); !ca.empty()) {
    client_options.tls.emplace();
    client_options.tls->ca_file = ca;
    if (env_or_empty("DSL_TLS_CLIENT_CERTIFICATES") == "1") {
      if (core::Status fetched =
              fetch_rank_certificate(address, token, rank_env->rank, attempt, *client_options.tls);
          !fetched.ok()) {
        spdlog::error("{}", fetched.message());
        comm::mpi_finalize();
        return fetched.code() == core::StatusCode::kUnavailable ? kControllerLost : kUnusable;
      }
    }
  }
  proto::ControllerClient client(address, token, client_options);
  v1::RegisterRequest request;
  request.set_rank(rank_env->rank);
  request.set_restart_count(attempt);
  request.set_host(host_name());
  request.set_pid(getpid());
  request.set_device(
      env_or_empty("DSL_DEVICE") == "cuda" ? fmt::format("cuda:{}", rank_env->local_rank) : "cpu");
  request.set_version(version_line("dsworker"));
  v1::RegisterReply reply;
  const core::Status registered =
      with_retries([&] { return client.register_rank(request, &reply); });
  if (!registered.ok()) {
    spdlog::error("cannot register with the controller at {}: {}", address,
                  registered.message());
    comm::mpi_finalize();
    return registered.code() == core::StatusCode::kUnavailable ? kControllerLost : kUnusable;
  }

  spec::Diagnostics diagnostics;
  spec::SourceMap locations;
  const spec::JobSpec spec = spec::parse_job_spec(
      reply.resolved_spec_yaml(), reply.job_id() + "/spec.yaml", {}, diagnostics, locations);
  if (diagnostics.has_errors()) {
    spdlog::error("the controller's resolved spec does not load:\n{}", diagnostics.format());
    comm::mpi_finalize();
    return kUnusable;
  }
  bind_to_cores(reply.placement());

  RankStatus status;
  const pthread_t workload_thread = pthread_self();
  std::mutex heartbeat_mutex;
  std::condition_variable heartbeat_wake;
  std::atomic<bool> closing{false};
  std::atomic<bool> controller_lost{false};
  std::unique_ptr<proto::Session> session = client.open_session(
      rank_env->rank,
      [&](const v1::ControllerCommand& command) {
        switch (command.kind()) {
          case v1::ControllerCommand::KIND_STOP:
            status.stop_requested.store(true);
            break;
          case v1::ControllerCommand::KIND_DUMP_STACKS:
            status.stacks_requested.store(true);
            heartbeat_wake.notify_all();
            break;
          case v1::ControllerCommand::KIND_CHECKPOINT_NOW:
            status.checkpoint_requested.store(true);
            break;
          default:
            break;
        }
      },
      [&](const core::Status& end) {
        if (closing.load()) return;
        controller_lost.store(true);
        spdlog::error("lost the controller ({}); exiting", end.message());
        // The job cannot be supervised, stopped or restarted any more: end
        // this rank now rather than run on unseen.
        std::_Exit(kControllerLost);
      });

  const auto interval = std::max<std::chrono::milliseconds>(
      timing::kMinHeartbeatInterval, std::chrono::milliseconds(reply.heartbeat_interval_ms()));
  std::thread heartbeats(heartbeat_loop, std::ref(*session), std::ref(status), interval,
                         workload_thread, std::ref(heartbeat_mutex), std::ref(heartbeat_wake));

  int exit_code = kDone;
  // The plan's grid and batch, as the controller sent them.
  const topology::GridShape shape{reply.grid().pipeline(), reply.grid().data(),
                                  reply.grid().tensor()};
  const auto publish_transport = [&](const comm::Transport* transport) {
    std::lock_guard<std::mutex> lock(heartbeat_mutex);
    status.transport = transport;
  };
  comm::CommOptions comm_options;
  comm_options.wait.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(spec.fault_tolerance.collective_timeout_s * 1000));
  // A collective past its timeout: a peer never joined it. Report the hang
  // (the controller then collects stacks, ends the attempt and restarts),
  // and stay put, neither unwinding (the collective may still write its
  // buffers) nor exiting first (this rank's stack shows where it waited).
  comm_options.wait.on_deadline = [&session](const core::Status& hang,
                                            const comm::HangReport& report) {
    spdlog::error("{}", hang.message());
    v1::WorkerMessage out;
    v1::WorkerEvent* event = out.mutable_event();
    event->set_kind(v1::WorkerEvent::KIND_HUNG);
    event->set_message(hang.message());
    event->mutable_hung()->set_group(report.group);
    event->mutable_hung()->set_sequence(report.sequence);
    for (const int member : report.world_ranks) event->mutable_hung()->add_world_ranks(member);
    session->send(out);
    std::this_thread::sleep_for(timing::kHungRankGrace);
    std::_Exit(kWorkloadFailed);
  };
  auto created = comm::create_mpi_process_groups(shape, comm_options);
  std::unique_ptr<comm::ProcessGroups> groups;
  if (!created.ok()) {
    send_event(*session, v1::WorkerEvent::KIND_ERROR,
               "process groups: " + created.status().message());
    exit_code = kWorkloadFailed;
  } else if (groups = std::move(created.value()), publish_transport(&groups->transport());
             spec.kind == spec::JobKind::kCommbench) {
    exit_code = run_commbench_workload(spec, *groups, *session, status);
  } else {
    TrainWorkloadContext context;
    context.spec = &spec;
    context.groups = groups.get();
    context.batch = {reply.batch().train_batch_size(), reply.batch().micro_batch_per_gpu(),
                     reply.batch().gradient_accumulation_steps()};
    context.session = session.get();
    context.job_directory = reply.job_directory();
    context.checkpoint_directory = reply.checkpoint_directory();
    context.resume = resume_point(reply);
    context.compute_threads = compute_threads(reply.placement());
    context.gpu = planned_gpu(reply.placement().device()).value_or(0);
    context.stop_requested = [&status] {
      return status.stop_requested.load() || g_stop_signal.load() != 0;
    };
    context.stop_reason = [] {
      const int signal = g_stop_signal.load();
      return signal == 0 ? std::string() : std::string("SIG") + sigabbrev_np(signal);
    };
    context.checkpoint_requested = [&status] {
      return status.checkpoint_requested.exchange(false);
    };
    context.on_writing_checkpoint = [&status] { status.phase.store(v1::PHASE_CHECKPOINT); };
    context.on_step_started = [&status, &spec, &rank_env, attempt, &groups](int64_t step) {
      status.step.store(step);
      status.phase.store(v1::PHASE_TRAIN);
      inject_fault(spec.testing.fault, rank_env->rank, attempt, step, groups->transport());
    };
    context.poison_gradients = [&spec, &rank_env, attempt](int64_t step) {
      return poisons_gradients(spec.testing.fault, rank_env->rank, attempt, step);
    };
    context.on_step_done = [&status](const engine::StepReport& report) {
      status.loss.store(report.loss);
      status.tokens_per_s.store(report.tokens_per_second);
      status.step_time_s.store(report.step_seconds);
      status.pipeline_wait_s.store(report.pipeline_wait_seconds);
      status.comm_bytes.store(report.comm_bytes);
      status.compression_ratio.store(report.compression_ratio.value_or(0));
    };
    context.on_memory = [&status](const engine::MemoryReport& memory) {
      status.parameter_bytes.store(memory.parameters);
      status.gradient_bytes.store(memory.gradients);
      status.optimizer_state_bytes.store(memory.optimizer_states);
      status.activation_bytes.store(memory.activations);
      status.communication_bytes.store(memory.communication_buffers);
      status.gradient_workspace_peak_bytes.store(memory.gradient_workspace_peak);
      status.parameter_workspace_peak_bytes.store(memory.parameter_workspace_peak);
      status.weight_copy_bytes.store(memory.weight_copy);
      status.peak_device_bytes.store(memory.device_peak);
    };
    install_stop_signal_handlers(spec.cluster.runner);
    exit_code = run_train_workload(context);
  }
  publish_transport(nullptr);
  groups.reset();

  status.phase.store(v1::PHASE_FINISHED);
  {
    std::lock_guard<std::mutex> lock(heartbeat_mutex);
    status.finished.store(true);
  }
  heartbeat_wake.notify_all();
  heartbeats.join();
  v1::WorkerMessage last;
  fill_heartbeat(status, *last.mutable_heartbeat());
  session->send(last);
  closing.store(true);
  // The rank's work is done whatever the stream's final status says.
  (void)session->close();
  if (exit_code == kDone) comm::mpi_finalize();
  return exit_code;
}

}  // namespace dslaunch::worker
