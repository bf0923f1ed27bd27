// The controller under load: N simulated ranks (default 4,096) speaking the
// real protocol (Register, then one Session each with one heartbeat per
// second, spread evenly over the second) against one ControllerServer whose
// handler records, for every heartbeat, the time from the worker's send() to
// the handler seeing it. Prints the p50/p99 handling latency and the
// controller's CPU use beside the targets (p99 < 50 ms, < 1 core).
//
// The workers run in a forked child process, so the parent's getrusage() is
// the controller alone. Each worker's send time goes into shared memory
// (CLOCK_MONOTONIC, the same clock in both processes), indexed by rank and
// step, so the heartbeats on the wire are exactly what a dsworker sends.
//
//   bazel run //bench:controller_load_bench -- [--workers N] [--seconds S]
//       [--connections C] [--warmup S]
//
// --connections: TCP connections the workers share (default: one each, as
// real ranks have; fewer multiplexes sessions as HTTP/2 streams).
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "launcher/controller/controller_handler.h"
#include "launcher/controller/controller_server.h"
#include "proto/auth.h"
#include "proto/controller_client.h"

namespace {

namespace v1 = dslaunch::v1;
using namespace std::chrono_literals;

constexpr double kTargetP99Ms = 50;
constexpr double kTargetCores = 1;
constexpr int kRing = 8;  // send times kept per worker; a heartbeat older than 8 s is not expected

struct Options {
  int workers = 4096;
  int seconds = 20;
  int warmup = 3;
  int connections = 0;  // 0: one per worker
};

int64_t monotonic_ns() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

double cpu_seconds(int who) {
  rusage usage;
  getrusage(who, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Shared between the two processes (MAP_SHARED, before fork).
struct SharedClock {
  std::atomic<int64_t>* send_ns;  // [rank * kRing + step % kRing]
};

// Child -> parent, once the workers stopped.
struct WorkerReport {
  double registration_s = 0;
  double cpu_cores = 0;  // during the measured window
  int64_t sent_in_window = 0;
  int64_t refused_sends = 0;
  int64_t sessions_ended_early = 0;
  int64_t failed_registrations = 0;
};

bool write_all(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t size) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = read(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// --- The controller side (parent) ------------------------------------------

class RecordingHandler final : public dslaunch::controller::ControllerHandler {
 public:
  RecordingHandler(SharedClock clock, int workers) : clock_(clock), workers_(workers) {}

  grpc::Status register_rank(const v1::RegisterRequest& request,
                             v1::RegisterReply* reply) override {
    reply->set_job_id("controller-load-bench");
    reply->set_heartbeat_interval_ms(1000);
    reply->mutable_placement()->set_rank(request.rank());
    reply->mutable_placement()->set_world_size(workers_);
    return grpc::Status::OK;
  }

  void session_opened(int, std::shared_ptr<dslaunch::controller::CommandSink>) override {
    std::lock_guard lock(mutex_);
    ++open_;
    changed_.notify_all();
  }

  void worker_message(const v1::WorkerMessage& message) override {
    const int64_t now = monotonic_ns();
    if (!message.has_heartbeat() || message.rank() < 0 || message.rank() >= workers_) return;
    const int64_t step = message.heartbeat().step();
    const int64_t sent =
        clock_.send_ns[message.rank() * kRing + step % kRing].load(std::memory_order_acquire);
    std::lock_guard lock(mutex_);
    if (measuring_) latencies_us_.push_back(static_cast<float>(now - sent) / 1e3f);
  }

  void session_closed(int) override {
    std::lock_guard lock(mutex_);
    --open_;
    changed_.notify_all();
  }

  grpc::Status get_status(v1::JobStatus*) override { return grpc::Status::OK; }
  grpc::Status stop(const v1::StopRequest&, v1::StopReply*) override { return grpc::Status::OK; }

  bool wait_for_open(int count, std::chrono::seconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return open_ >= count; });
  }

  void set_measuring(bool on) {
    std::lock_guard lock(mutex_);
    measuring_ = on;
  }

  std::vector<float> take_latencies() {
    std::lock_guard lock(mutex_);
    return std::move(latencies_us_);
  }

 private:
  const SharedClock clock_;
  const int workers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int open_ = 0;
  bool measuring_ = false;
  std::vector<float> latencies_us_;
};

// --- The simulated workers (child) -------------------------------------------

int run_workers(const Options& options, SharedClock clock, int port_fd, int control_fd,
                int report_fd) {
  int port = 0;
  std::string token(64, '\0');
  if (!read_all(port_fd, &port, sizeof port) || !read_all(port_fd, token.data(), token.size())) {
    return 1;
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const int connections = options.connections > 0 ? options.connections : options.workers;

  dslaunch::proto::ClientOptions client_options;
  client_options.private_connection = true;
  std::vector<std::unique_ptr<dslaunch::proto::ControllerClient>> clients;
  for (int c = 0; c < connections; ++c) {
    clients.push_back(
        std::make_unique<dslaunch::proto::ControllerClient>(address, token, client_options));
  }

  WorkerReport report;
  const auto registration_start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < options.workers; ++rank) {
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_host("sim");
    request.set_pid(getpid());
    request.set_device("cpu");
    v1::RegisterReply reply;
    if (!clients[rank % connections]->register_rank(request, &reply).ok()) {
      ++report.failed_registrations;
    }
  }
  report.registration_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - registration_start).count();

  std::atomic<int64_t> ended_early{0};
  std::atomic<bool> closing{false};
  std::vector<std::unique_ptr<dslaunch::proto::Session>> sessions;
  for (int rank = 0; rank < options.workers; ++rank) {
    sessions.push_back(
        clients[rank % connections]->open_session(rank, {}, [&](const dslaunch::core::Status&) {
          if (!closing.load()) ended_early.fetch_add(1);
        }));
  }

  // One sender thread: worker i sends at i/N of every second.
  std::atomic<bool> stop{false};
  std::atomic<bool> in_window{false};
  std::atomic<int64_t> sent_in_window{0};
  std::atomic<int64_t> refused{0};
  std::thread sender([&] {
    const auto start = std::chrono::steady_clock::now();
    const auto period = std::chrono::nanoseconds(1'000'000'000);
    for (int64_t step = 1; !stop.load(); ++step) {
      for (int rank = 0; rank < options.workers && !stop.load(); ++rank) {
        std::this_thread::sleep_until(start + (step - 1) * period +
                                      period * rank / options.workers);
        v1::WorkerMessage message;
        v1::Heartbeat* heartbeat = message.mutable_heartbeat();
        heartbeat->set_step(step);
        heartbeat->set_loss(2.5);
        heartbeat->set_tokens_per_s(1.5e4);
        heartbeat->set_phase(v1::PHASE_TRAIN);
        heartbeat->mutable_memory()->set_parameters(int64_t{1} << 30);
        heartbeat->set_unix_time_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
        clock.send_ns[rank * kRing + step % kRing].store(monotonic_ns(), std::memory_order_release);
        if (!sessions[rank]->send(std::move(message))) {
          refused.fetch_add(1);
        } else if (in_window.load()) {
          sent_in_window.fetch_add(1);
        }
      }
    }
  });

  // The parent says when its measured window starts ('M') and ends ('S').
  char signal = 0;
  double window_cpu_start = 0;
  auto window_start = std::chrono::steady_clock::now();
  while (read_all(control_fd, &signal, 1)) {
    if (signal == 'M') {
      window_cpu_start = cpu_seconds(RUSAGE_SELF);
      window_start = std::chrono::steady_clock::now();
      in_window = true;
    } else if (signal == 'S') {
      in_window = false;
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
      report.cpu_cores = (cpu_seconds(RUSAGE_SELF) - window_cpu_start) / wall;
      break;
    }
  }
  stop = true;
  sender.join();
  closing = true;
  report.sent_in_window = sent_in_window.load();
  report.refused_sends = refused.load();
  report.sessions_ended_early = ended_early.load();
  for (auto& session : sessions) (void)session->close(2s);
  write_all(report_fd, &report, sizeof report);
  return 0;
}

double percentile(const std::vector<float>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t index = std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()));
  return sorted[index];
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--workers") options.workers = std::max(1, value);
    if (flag == "--seconds") options.seconds = std::max(1, value);
    if (flag == "--warmup") options.warmup = std::max(0, value);
    if (flag == "--connections") options.connections = std::max(0, value);
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  const int connections = options.connections > 0 ? options.connections : options.workers;

  // Each connection is one descriptor in each process.
  rlimit files;
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);

  const size_t slots = static_cast<size_t>(options.workers) * kRing;
  void* shared = mmap(nullptr, slots * sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  SharedClock clock{static_cast<std::atomic<int64_t>*>(shared)};
  for (size_t i = 0; i < slots; ++i) new (&clock.send_ns[i]) std::atomic<int64_t>(0);

  int port_pipe[2];
  int control_pipe[2];
  int report_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(control_pipe) != 0 || pipe(report_pipe) != 0) {
    std::perror("pipe");
    return 1;
  }
  // Fork before either process touches gRPC, so each starts its own threads.
  const pid_t child = fork();
  if (child == 0) {
    close(port_pipe[1]);
    close(control_pipe[1]);
    close(report_pipe[0]);
    _exit(run_workers(options, clock, port_pipe[0], control_pipe[0], report_pipe[1]));
  }
  close(port_pipe[0]);
  close(control_pipe[0]);
  close(report_pipe[1]);

  const dslaunch::proto::TokenResult token = dslaunch::proto::generate_token();
  RecordingHandler handler(clock, options.workers);
  dslaunch::controller::ControllerServerOptions server_options;
  server_options.token = token.token;
  dslaunch::controller::ControllerServer server(handler, server_options);
  const dslaunch::controller::StartResult started = server.start("127.0.0.1:0");
  if (!token.ok() || !started.ok()) {
    std::fprintf(stderr, "controller_load_bench: %s%s\n", token.error.c_str(),
                 started.error.c_str());
    kill(child, SIGKILL);
    return 1;
  }
  write_all(port_pipe[1], &started.port, sizeof started.port);
  write_all(port_pipe[1], token.token.data(), token.token.size());

  std::printf("controller_load_bench: %d simulated workers, 1 heartbeat/s each, %d connection%s\n",
              options.workers, connections, connections == 1 ? "" : "s");
  std::fflush(stdout);
  if (!handler.wait_for_open(options.workers, 300s)) {
    std::fprintf(stderr, "controller_load_bench: not every worker opened its session\n");
    kill(child, SIGKILL);
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(options.warmup));

  write_all(control_pipe[1], "M", 1);
  handler.set_measuring(true);
  const double cpu_start = cpu_seconds(RUSAGE_SELF);
  const auto window_start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(options.seconds));
  const double cpu_used = cpu_seconds(RUSAGE_SELF) - cpu_start;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
  handler.set_measuring(false);
  write_all(control_pipe[1], "S", 1);

  WorkerReport report;
  const bool reported = read_all(report_pipe[0], &report, sizeof report);
  int status = 0;
  waitpid(child, &status, 0);
  server.shutdown(2s);

  std::vector<float> latencies = handler.take_latencies();
  std::sort(latencies.begin(), latencies.end());
  const double p50 = percentile(latencies, 0.50) / 1e3;
  const double p99 = percentile(latencies, 0.99) / 1e3;
  const double max = latencies.empty() ? 0 : latencies.back() / 1e3;
  const double cores = cpu_used / wall;

  std::printf("  registration: %d ranks in %.2f s (%" PRId64 " failed)\n", options.workers,
              report.registration_s, report.failed_registrations);
  std::printf("  measured window: %.1f s after %d s warm-up; heartbeats handled %zu, sent %" PRId64
              " (%.0f/s)\n",
              wall, options.warmup, latencies.size(), report.sent_in_window,
              static_cast<double>(latencies.size()) / wall);
  std::printf(
      "  handling latency (send -> handler): p50 %.2f ms, p99 %.2f ms, max %.2f ms"
      "   target p99 < %.0f ms: %s\n",
      p50, p99, max, kTargetP99Ms, p99 < kTargetP99Ms ? "met" : "MISSED");
  std::printf("  controller CPU: %.3f cores (%.2f s over %.1f s)   target < %.0f core: %s\n", cores,
              cpu_used, wall, kTargetCores, cores < kTargetCores ? "met" : "MISSED");
  std::printf("  simulated workers (other process, not counted): %.3f cores; refused sends %" PRId64
              ", sessions lost %" PRId64 "\n",
              report.cpu_cores, report.refused_sends, report.sessions_ended_early);
  const bool ok = reported && p99 < kTargetP99Ms && cores < kTargetCores &&
                  report.sessions_ended_early == 0 && report.failed_registrations == 0;
  return ok ? 0 : 1;
}
