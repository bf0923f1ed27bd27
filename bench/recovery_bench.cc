// Recovery from a lost rank, end to end: a 2-rank GPT job on CPU has one
// rank killed (SIGKILL) or, with --hang, frozen (SIGSTOP), and the time from
// that moment to the first training step after the automatic restart is
// split into detection, teardown, backoff, restart and resume, from the job's
// events.jsonl and metrics.jsonl. Beside it, measured in the same run, the
// cold start of the same job (dslaunch launched -> first step), and the steps
// the restart had to train again.
//
//   bazel build //bench:recovery_bench && bazel-bin/bench/recovery_bench [--hang] [--runs 3]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kWorldSize = 2;
constexpr int kSteps = 400;
constexpr int kInterval = 20;
constexpr double kHeartbeatInterval = 0.5;
constexpr double kHangHeartbeatTimeout = 3;
// Killing a rank must not look like a hang: heartbeats only matter with --hang.
constexpr double kKillHeartbeatTimeout = 30;

std::atomic<bool> g_interrupted{false};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Polls `done` until it holds or `timeout` passes; false then, or when the
// bench itself was interrupted.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until && !g_interrupted) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return !g_interrupted && done();
}

struct Programs {
  std::string dslaunch;
  std::string worker;
  std::string tokenizer;
};

// Where Bazel put this binary's data dependencies: $RUNFILES_DIR under
// `bazel run`, otherwise the .runfiles folder beside the binary.
fs::path runfiles_root() {
  if (const char* dir = std::getenv("RUNFILES_DIR")) return fs::path(dir) / "dslaunch";
  return fs::path(fs::read_symlink("/proc/self/exe").string() + ".runfiles") / "dslaunch";
}

// Starts `argv` with `env` added, stdout and stderr into `log`, in a process
// group of its own, so that an interrupt typed at the bench reaches the
// bench alone and it can clean up.
pid_t spawn(const std::vector<std::string>& argv,
            const std::vector<std::pair<std::string, std::string>>& env, const fs::path& log) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("cannot fork to run {}", argv[0]));
  if (pid == 0) {
    setpgid(0, 0);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    if (out == nullptr) _exit(127);
    dup2(fileno(out), STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// The exit code of `pid` once it ended (-1 when a signal ended it), without waiting.
std::optional<int> try_reap(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// Processes carrying DSL_JOB_ID=`job_id` in their environment: the launcher
// (in a session of its own) and the ranks of every attempt.
std::vector<pid_t> processes_of(const std::string& job_id) {
  std::vector<pid_t> found;
  const std::string needle = "DSL_JOB_ID=" + job_id + std::string(1, '\0');
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string environ = read_text(entry.path() / "environ");
    std::ifstream stat(entry.path() / "stat");
    std::string pid, command, state;
    stat >> pid >> command >> state;
    if (state != "Z" && environ.find(needle) != std::string::npos) {
      found.push_back(std::stoi(name));
    }
  }
  return found;
}

// One line of metrics.jsonl with a loss: a training step of rank 0.
struct StepLine {
  int64_t step = 0;
  int64_t time_ms = 0;  // when the controller received it
};

// Reads the step lines appended to metrics.jsonl since the last poll.
class MetricsTail {
 public:
  explicit MetricsTail(fs::path path) : path_(std::move(path)) {}

  void poll() {
    std::ifstream file(path_, std::ios::binary);
    if (!file) return;
    file.seekg(offset_);
    std::string line;
    while (std::getline(file, line)) {
      if (file.eof()) break;  // a line still being written
      offset_ += static_cast<std::streamoff>(line.size()) + 1;
      const nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
      if (json.is_discarded() || json.contains("what") || !json.contains("loss")) continue;
      lines_.push_back({json["step"].get<int64_t>(), json["time_ms"].get<int64_t>()});
    }
  }

  const std::vector<StepLine>& lines() const { return lines_; }

  int64_t last_step() const {
    int64_t last = 0;
    for (const StepLine& line : lines_) last = std::max(last, line.step);
    return last;
  }

 private:
  fs::path path_;
  std::streamoff offset_ = 0;
  std::vector<StepLine> lines_;
};

struct Event {
  int64_t time_ms = 0;
  std::string kind;
};

std::vector<Event> read_events(const fs::path& job) {
  std::vector<Event> events;
  std::ifstream file(job / "events.jsonl");
  std::string line;
  while (std::getline(file, line)) {
    const nlohmann::json json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded()) continue;
    events.push_back({std::llround(json["time"].get<double>() * 1000), json["kind"]});
  }
  return events;
}

nlohmann::json read_state(const fs::path& job) {
  const nlohmann::json state = nlohmann::json::parse(read_text(job / "state.json"), nullptr, false);
  return state.is_discarded() ? nlohmann::json::object() : state;
}

// The ranks' pids once state.json shows the attempt running.
std::vector<pid_t> running_ranks(const fs::path& job) {
  std::vector<pid_t> pids;
  const nlohmann::json state = read_state(job);
  if (state.value("state", "") != "RUNNING" || !state.contains("ranks")) return pids;
  for (const auto& rank : state["ranks"]) {
    if (rank.value("pid", int64_t{0}) > 0) pids.push_back(rank["pid"].get<pid_t>());
  }
  return pids;
}

// The events of one attempt's start, from `from` on: when its controller
// started and when its last rank registered.
struct AttemptStart {
  int64_t controller_started_ms = 0;
  int64_t registered_ms = 0;
};

std::optional<AttemptStart> attempt_start(const std::vector<Event>& events, size_t from) {
  AttemptStart start;
  int registered = 0;
  for (size_t i = from; i < events.size(); ++i) {
    if (events[i].kind == "controller_started" && start.controller_started_ms == 0) {
      start.controller_started_ms = events[i].time_ms;
    } else if (events[i].kind == "registered" && start.controller_started_ms != 0 &&
               ++registered == kWorldSize) {
      start.registered_ms = events[i].time_ms;
      return start;
    }
  }
  return std::nullopt;
}

// Everything measured on one job, in unix milliseconds unless said.
struct Run {
  int killed_rank = 0;
  int64_t launched_ms = 0;    // dslaunch forked
  AttemptStart cold;          // its first attempt
  int64_t first_step_ms = 0;  // the first step of the fresh run
  double step_ms = 0;         // median time between steps before the fault
  int64_t fault_ms = 0;       // SIGKILL or SIGSTOP sent
  int64_t reacted_ms = 0;     // the controller's first event after the fault
  std::string reaction;       // that event's kind
  int64_t finished_ms = 0;    // the failed attempt's "finished" event
  AttemptStart restart;       // the next attempt
  int64_t resumed_step_ms = 0;  // the first step of the new attempt
  int64_t regained_ms = 0;      // the new attempt back at `last_step`
  int64_t seen_at_fault = 0;    // the newest step in metrics.jsonl at the fault
  int64_t last_step = 0;        // the newest step of the failed attempt
  int64_t resumed_from = 0;     // the checkpoint step the new attempt loaded
};

class Bench {
 public:
  Bench(Programs programs, fs::path dir, bool hang, int fault_step)
      : programs_(std::move(programs)), dir_(std::move(dir)), hang_(hang),
        fault_step_(fault_step) {}

  double heartbeat_timeout() const { return hang_ ? kHangHeartbeatTimeout : kKillHeartbeatTimeout; }

  // Sentences from a tiny grammar, tokenized byte by byte, as the chaos test does.
  void write_data() const {
    const std::vector<std::string> words = {"the cat", "a dog",  "sees",
                                            "likes",   "a ball", "the map"};
    std::mt19937_64 engine(7);
    std::string text;
    for (int i = 0; i < 3000; ++i) {
      text += words[engine() % 2] + " " + words[2 + engine() % 2] + " " +
              words[4 + engine() % 2] + ".\n";
    }
    std::ofstream(dir_ / "corpus.txt") << text;
    const fs::path log = dir_ / "tokenize.log";
    const pid_t pid = spawn({programs_.tokenizer, (dir_ / "corpus.txt").string(), "--out",
                             (dir_ / "train.bin").string(), "--valid-out",
                             (dir_ / "valid.bin").string(), "--valid-fraction", "0.1"},
                            {}, log);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error("tokenize_text failed:\n" + read_text(log));
    }
  }

  // One job: started cold, one rank faulted after `fault_step_`, measured
  // until the restarted attempt is back where the fault left it, then ended.
  Run measure(int index) {
    const std::string job_id = fmt::format("recovery-bench-{}-{}", getpid(), index);
    const fs::path job = dir_ / "jobs" / job_id;
    const fs::path log = dir_ / (job_id + ".log");
    Run run;
    run.killed_rank = index % 2 == 0 ? 1 : 0;
    run.launched_ms = now_ms();
    dslaunch_ = spawn({programs_.dslaunch, "run", write_spec().string(), "--job-dir",
                       job.string(), "--progress", "off"},
                      {{"DSLAUNCH_HOME", dir_.string()}, {"DSLAUNCH_WORKER", programs_.worker}},
                      log);
    job_id_ = job_id;
    try {
      measure_job(job, run);
    } catch (const std::exception& e) {
      end_job();
      throw std::runtime_error(fmt::format("{}\n--- {} ---\n{}", e.what(), log.string(),
                                           read_text(log)));
    }
    end_job();
    return run;
  }

  // Ends the job in flight, if any: dslaunch and every process of the job.
  void end_job() {
    if (dslaunch_ > 0) {
      // Two interrupts stop a job at once; what does not leave is killed.
      kill(dslaunch_, SIGINT);
      std::this_thread::sleep_for(50ms);
      kill(dslaunch_, SIGINT);
      const auto until = std::chrono::steady_clock::now() + 10s;
      bool gone = false;
      while (!(gone = try_reap(dslaunch_).has_value()) &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(20ms);
      }
      if (!gone) {
        kill(dslaunch_, SIGKILL);
        waitpid(dslaunch_, nullptr, 0);
      }
      dslaunch_ = -1;
    }
    for (int round = 0; round < 100; ++round) {
      const std::vector<pid_t> left = processes_of(job_id_);
      if (left.empty()) break;
      for (const pid_t pid : left) kill(pid, SIGKILL);
      std::this_thread::sleep_for(50ms);
    }
  }

 private:
  // The chaos test's job: 2 ranks, checkpoints every kInterval steps.
  fs::path write_spec() const {
    const fs::path spec = dir_ / "recovery.yaml";
    std::ofstream(spec) << fmt::format(R"(name: recovery
cluster: {{device: cpu, num_gpus: {}}}
model:
  num_layers: 4
  hidden_size: 128
  num_attention_heads: 4
  vocab_size: 256
  seq_length: 32
  make_vocab_size_divisible_by: 64
data: {{train: train.bin, valid: valid.bin}}
training:
  train_batch_size: 8
  train_micro_batch_size_per_gpu: 4
  steps: {}
  eval_interval: 100
  eval_batches: 2
  gradient_clipping: 1.0
  zero_optimization: {{stage: 2, reduce_bucket_size: 50000}}
  optimizer: {{type: AdamW, params: {{lr: 0.003, weight_decay: 0.1}}}}
checkpoint: {{interval: {}, keep: 2}}
fault_tolerance: {{heartbeat_interval: {}, heartbeat_timeout: {}, max_restarts: 2}}
)",
                                       kWorldSize, kSteps, kInterval, kHeartbeatInterval,
                                       heartbeat_timeout());
    return spec;
  }

  void require(bool ok, const std::string& what) {
    if (g_interrupted) throw std::runtime_error("interrupted");
    if (!ok) throw std::runtime_error("timed out waiting for " + what);
    if (const auto code = try_reap(dslaunch_)) {
      dslaunch_ = -1;
      throw std::runtime_error(fmt::format("dslaunch exited with {} too early", *code));
    }
  }

  void measure_job(const fs::path& job, Run& run) {
    MetricsTail metrics(job / "metrics.jsonl");
    const auto progressed = [&metrics](int64_t step) {
      return [&metrics, step] {
        metrics.poll();
        return metrics.last_step() >= step;
      };
    };
    require(wait_until(progressed(fault_step_), 120s), fmt::format("step {}", fault_step_));
    std::vector<pid_t> ranks;
    require(wait_until([&] { return (ranks = running_ranks(job)).size() == kWorldSize; }, 10s),
            "state.json to list the ranks");
    run.fault_ms = now_ms();
    kill(ranks[run.killed_rank], hang_ ? SIGSTOP : SIGKILL);

    run.seen_at_fault = metrics.last_step();

    // The controller of the failed attempt is gone before the next one
    // starts, so steps it received after the failed attempt finished are the
    // new attempt's.
    const auto restarted = [&] {
      metrics.poll();
      read_failure(read_events(job), run);
      return run.finished_ms != 0 && !metrics.lines().empty() &&
             metrics.lines().back().time_ms > run.finished_ms;
    };
    require(wait_until(restarted, 120s), "the first step after the restart");
    const std::vector<StepLine> lines = metrics.lines();
    size_t resumed_line = 0;
    while (lines[resumed_line].time_ms <= run.finished_ms) ++resumed_line;
    const std::vector<StepLine> before(lines.begin(), lines.begin() + resumed_line);
    for (const StepLine& line : before) run.last_step = std::max(run.last_step, line.step);
    // An attempt starts at the step after the checkpoint it loaded.
    run.resumed_from = lines[resumed_line].step - 1;
    const int64_t regain = std::max(run.last_step, run.resumed_from + 1);
    const auto regained = [&] {
      metrics.poll();
      for (size_t i = resumed_line; i < metrics.lines().size(); ++i) {
        if (metrics.lines()[i].step >= regain) {
          run.regained_ms = metrics.lines()[i].time_ms;
          return true;
        }
      }
      return false;
    };
    require(wait_until(regained, 60s),
            fmt::format("the restarted job to reach step {} again", regain));
    run.first_step_ms = lines.front().time_ms;
    run.resumed_step_ms = lines[resumed_line].time_ms;
    std::vector<double> gaps;
    for (size_t i = 1; i < before.size(); ++i) {
      gaps.push_back(static_cast<double>(before[i].time_ms - before[i - 1].time_ms));
    }
    std::sort(gaps.begin(), gaps.end());
    run.step_ms = gaps.empty() ? 0 : gaps[gaps.size() / 2];

    read_starts(read_events(job), run);
  }

  // The failed attempt's end: the controller's first reaction to the fault
  // and its "finished" event; zero while they are not in `events` yet.
  static void read_failure(const std::vector<Event>& events, Run& run) {
    run.reacted_ms = 0;
    run.finished_ms = 0;
    for (const Event& event : events) {
      if (event.time_ms < run.fault_ms) continue;
      const bool reaction = event.kind == "lost" || event.kind == "error" ||
                            event.kind == "terminating" || event.kind == "launcher_exited" ||
                            event.kind == "finished";
      if (reaction && run.reacted_ms == 0) {
        run.reacted_ms = event.time_ms;
        run.reaction = event.kind;
      }
      if (event.kind == "finished") {
        run.finished_ms = event.time_ms;
        return;
      }
    }
  }

  // The starts of the first attempt and of the one after the failure.
  static void read_starts(const std::vector<Event>& events, Run& run) {
    const auto cold = attempt_start(events, 0);
    size_t after_failure = 0;
    while (after_failure < events.size() && events[after_failure].time_ms <= run.finished_ms) {
      ++after_failure;
    }
    const auto restart = attempt_start(events, after_failure);
    if (!cold || !restart) {
      throw std::runtime_error("events.jsonl lacks the start of the first or the restarted attempt");
    }
    run.cold = *cold;
    run.restart = *restart;
  }

  Programs programs_;
  fs::path dir_;
  bool hang_;
  int fault_step_;
  pid_t dslaunch_ = -1;
  std::string job_id_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One table row: each run's value, then their median.
void row(const std::vector<Run>& runs, const std::string& label,
         const std::function<double(const Run&)>& value, int decimals = 0,
         bool with_median = true) {
  std::vector<double> values;
  std::cout << fmt::format("{:<52}", label);
  for (const Run& run : runs) {
    values.push_back(value(run));
    std::cout << fmt::format("{:>9.{}f}", values.back(), decimals);
  }
  if (with_median) std::cout << fmt::format("{:>9.{}f}", median(values), decimals);
  std::cout << "\n";
}

void print(const std::vector<Run>& runs, bool hang, double heartbeat_timeout, int fault_step) {
  std::cout << fmt::format(
      "\n2-rank GPT on CPU (4 layers, hidden 128, seq 32, vocab 256), checkpoint every {} steps,"
      "\nheartbeat interval {} s, heartbeat timeout {} s, first restart after a 1 s backoff."
      "\nFault: {} of one rank once the job passed step {}. Times in ms.\n\n",
      kInterval, kHeartbeatInterval, heartbeat_timeout, hang ? "SIGSTOP (hung)" : "SIGKILL",
      fault_step);
  std::cout << fmt::format("{:<52}", "");
  for (size_t i = 0; i < runs.size(); ++i) std::cout << fmt::format("{:>9}", fmt::format("run {}", i + 1));
  std::cout << fmt::format("{:>9}\n", "median");
  row(runs, "faulted rank", [](const Run& r) { return r.killed_rank; }, 0, false);
  std::cout << "\n";
  row(runs, "RECOVERY: fault -> first step after restart",
      [](const Run& r) { return r.resumed_step_ms - r.fault_ms; });
  row(runs, "  detection: fault -> controller reacts",
      [](const Run& r) { return r.reacted_ms - r.fault_ms; });
  row(runs, "  teardown: -> failed attempt finished",
      [](const Run& r) { return r.finished_ms - r.reacted_ms; });
  row(runs, "  backoff: -> next attempt's controller started",
      [](const Run& r) { return r.restart.controller_started_ms - r.finished_ms; });
  row(runs, "  restart: -> all ranks registered",
      [](const Run& r) { return r.restart.registered_ms - r.restart.controller_started_ms; });
  row(runs, "  resume: -> first step (checkpoint load + step)",
      [](const Run& r) { return r.resumed_step_ms - r.restart.registered_ms; });
  std::cout << "\n";
  row(runs, "newest step when the fault was sent",
      [](const Run& r) { return static_cast<double>(r.seen_at_fault); });
  row(runs, "last step of the failed attempt",
      [](const Run& r) { return static_cast<double>(r.last_step); });
  row(runs, "checkpoint step resumed from",
      [](const Run& r) { return static_cast<double>(r.resumed_from); });
  row(runs, "steps redone", [](const Run& r) { return r.last_step - r.resumed_from; });
  row(runs, "  redo time: first step after restart -> last step",
      [](const Run& r) { return r.regained_ms - r.resumed_step_ms; });
  row(runs, "fault -> progress regained (last step again)",
      [](const Run& r) { return r.regained_ms - r.fault_ms; });
  std::cout << "\n";
  row(runs, "REFERENCE: cold start, dslaunch -> first step",
      [](const Run& r) { return r.first_step_ms - r.launched_ms; });
  row(runs, "  dslaunch start-up: -> controller started",
      [](const Run& r) { return r.cold.controller_started_ms - r.launched_ms; });
  row(runs, "  launch: -> all ranks registered",
      [](const Run& r) { return r.cold.registered_ms - r.cold.controller_started_ms; });
  row(runs, "  first step: -> first step",
      [](const Run& r) { return r.first_step_ms - r.cold.registered_ms; });
  row(runs, "step time before the fault (median)", [](const Run& r) { return r.step_ms; }, 1);
  std::cout << "\n";
  row(runs, "recovery - (detection + teardown + backoff)",
      [](const Run& r) { return r.resumed_step_ms - r.restart.controller_started_ms; });
  row(runs, "  vs cold start without dslaunch start-up",
      [](const Run& r) { return r.first_step_ms - r.cold.controller_started_ms; });
  std::cout << "\nDetection ends at the controller's first event after the fault:";
  for (const Run& run : runs) std::cout << " " << run.reaction;
  std::cout << " (run 1, 2, ...).\n";
}

fs::path make_temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = (fs::path(tmp && *tmp ? tmp : "/tmp") / "recovery_bench.XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary folder from " + pattern);
  }
  return pattern;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Recovery from a lost rank beside the cold start of the same job"};
  int runs = 3;
  bool hang = false;
  int fault_step = 50;
  Programs programs;
  const fs::path runfiles = runfiles_root();
  programs.dslaunch = (runfiles / "launcher/dslaunch").string();
  programs.worker = (runfiles / "worker/dsworker").string();
  programs.tokenizer = (runfiles / "tools/tokenize/tokenize_text").string();
  app.add_option("--runs", runs, "jobs, one fault each")->check(CLI::Range(1, 20));
  app.add_flag("--hang", hang, "SIGSTOP a rank instead of SIGKILL: found by heartbeats");
  app.add_option("--fault-step", fault_step, "fault once the job passed this step")
      ->check(CLI::Range(1, kSteps - 2 * kInterval));
  app.add_option("--dslaunch", programs.dslaunch, "dslaunch binary")->capture_default_str();
  app.add_option("--worker", programs.worker, "dsworker binary")->capture_default_str();
  app.add_option("--tokenizer", programs.tokenizer, "tokenize_text binary")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  for (const std::string& program : {programs.dslaunch, programs.worker, programs.tokenizer}) {
    if (!fs::exists(program)) {
      std::cerr << "recovery_bench: " << program
                << " not found: build with `bazel build //bench:recovery_bench` or pass its path\n";
      return 1;
    }
  }
  struct sigaction on_interrupt {};
  on_interrupt.sa_handler = [](int) { g_interrupted = true; };
  sigaction(SIGINT, &on_interrupt, nullptr);
  sigaction(SIGTERM, &on_interrupt, nullptr);

  const fs::path dir = make_temp_dir();
  int code = 0;
  try {
    Bench bench(programs, dir, hang, fault_step);
    bench.write_data();
    std::vector<Run> measured;
    for (int i = 0; i < runs; ++i) {
      std::cerr << fmt::format("recovery_bench: run {} of {}\n", i + 1, runs);
      measured.push_back(bench.measure(i));
    }
    print(measured, hang, bench.heartbeat_timeout(), fault_step);
  } catch (const std::exception& e) {
    std::cerr << "recovery_bench: " << e.what() << "\n";
    code = 1;
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return code;
}
