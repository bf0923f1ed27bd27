#include "launcher/job_commands.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/byte_size_text.h"
#include "core/host_name.h"
#include "core/status.h"
#include "launcher/controller/job_directory.h"
#include "launcher/controller/job_status.h"
#include "launcher/job_dir_path.h"
#include "proto/controller_client.h"

namespace dslaunch::launcher {
namespace {

namespace fs = std::filesystem;
namespace v1 = dslaunch::v1;
using controller::JobDirectory;

constexpr int kOk = 0;
constexpr int kUnreachable = 1;
constexpr int kBadInput = 2;
constexpr std::chrono::milliseconds kStatusDeadline{2000};

bool is_final_state(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "STOPPED";
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string age_text(int64_t milliseconds) {
  if (milliseconds < 0) return "-";
  const int64_t s = milliseconds / 1000;
  if (s < 120) return fmt::format("{}s", s);
  if (s < 7200) return fmt::format("{}m", s / 60);
  if (s < 172800) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

// TLS towards the job's controller when its job uses it.
proto::ClientOptions client_options(const v1::JobStatus& status) {
  proto::ClientOptions options;
  if (!status.tls_ca().empty()) {
    options.tls.emplace();
    options.tls->ca_file = status.tls_ca();
  }
  return options;
}

struct JobView {
  v1::JobStatus status;
  bool live = false;  // answered by the running controller
  std::string note;   // why a running job's status is not live
};

// Whether the controller that state.json names is known to be gone: it ran
// on this machine and its pid is no longer a dslaunch process (a pid the
// system gave to another program since counts as gone). A controller on
// another machine cannot be checked from here.
bool controller_gone(const v1::JobStatus& status) {
  if (status.controller_pid() <= 0 || status.controller_host() != core::host_name()) return false;
  std::ifstream comm(fmt::format("/proc/{}/comm", status.controller_pid()));
  std::string name;
  return !std::getline(comm, name) || name != "dslaunch";
}

// A running job whose controller does not answer: LOST when the controller
// is gone (its ranks went with it: they exit when their session breaks),
// UNKNOWN when it may still run elsewhere. Either way the ranks' last
// states are not current, and `resume` is what continues the job.
void mark_unanswered(JobView& view, const std::string& why) {
  v1::JobStatus& s = view.status;
  const bool gone = controller_gone(s);
  const std::string resume =
      fmt::format("`dslaunch resume {}` continues it from {}", s.job_id(),
                  s.last_checkpoint_step() > 0
                      ? fmt::format("the checkpoint of step {}", s.last_checkpoint_step())
                      : std::string("step 0 (no checkpoint yet)"));
  if (gone) {
    view.note = fmt::format("its controller (pid {} on {}) is gone; {}", s.controller_pid(),
                            s.controller_host(), resume);
  } else {
    view.note = fmt::format("{}; state.json written {} ago; if the controller has ended, {}", why,
                            age_text(now_unix_ms() - s.updated_unix_ms()), resume);
  }
  s.set_state(gone ? "LOST" : "UNKNOWN");
  for (v1::RankStatus& rank : *s.mutable_ranks()) {
    if (rank.state() == "running") rank.set_state(gone ? "lost" : "unknown");
  }
}

// The job's status: live from its controller while it runs, else state.json.
std::optional<JobView> view_job(const JobDirectory& directory, std::string& error) {
  const auto state = directory.read_state(error);
  if (!state) return std::nullopt;
  JobView view;
  view.status = controller::status_from_json(*state);
  if (is_final_state(view.status.state())) return view;
  std::string token_error;
  const auto token = directory.read_token(token_error);
  if (!token || view.status.controller_address().empty()) {
    mark_unanswered(view, token ? "no controller address recorded" : token_error);
    return view;
  }
  proto::ClientOptions options = client_options(view.status);
  options.deadline = kStatusDeadline;
  proto::ControllerClient client(view.status.controller_address(), *token, options);
  v1::JobStatus live;
  const core::Status answered = client.get_status(&live);
  if (answered.ok()) {
    view.status = live;
    view.live = true;
  } else {
    mark_unanswered(view, fmt::format("controller at {} not answering ({})",
                                      view.status.controller_address(), answered.message()));
  }
  return view;
}

// At the pace of the current attempt: its steps since the step it resumed
// from, over the time since it began (a resumed job's global step counts
// steps an earlier run took).
std::string eta_text(const v1::JobStatus& status) {
  if (status.total_steps() <= 0 || status.step() <= 0 || is_final_state(status.state())) return "-";
  int64_t started = status.started_unix_ms();
  int64_t first_step = 0;
  if (status.attempts_size() > 0) {
    const v1::AttemptSummary& current = status.attempts(status.attempts_size() - 1);
    if (current.started_unix_ms() > 0) started = current.started_unix_ms();
    first_step = current.resumed_from_step();
  }
  const int64_t done = status.step() - first_step;
  if (done <= 0) return "-";
  const int64_t elapsed = status.updated_unix_ms() - started;
  return age_text(elapsed * (status.total_steps() - status.step()) / done);
}

void print_jobs_table(const std::vector<JobView>& views) {
  std::cout << fmt::format("{:<40} {:<10} {:>8} {:>5} {:>13} {:>9} {:>10} {:>6} {:>9} {:>6}  {}\n",
                           "job", "state", "restarts", "ranks", "step", "loss", "tokens/s", "ETA",
                           "last ckpt", "age", "reason");
  for (const JobView& view : views) {
    const v1::JobStatus& s = view.status;
    const std::string step = s.total_steps() > 0 ? fmt::format("{}/{}", s.step(), s.total_steps())
                                                 : fmt::format("{}", s.step());
    std::string reason = s.reason();
    if (!view.note.empty()) reason = reason.empty() ? view.note : reason + "; " + view.note;
    std::cout << fmt::format(
        "{:<40} {:<10} {:>8} {:>5} {:>13} {:>9} {:>10} {:>6} {:>9} {:>6}  {}\n", s.job_id(),
        s.state(), s.restarts(), s.world_size(), step,
        s.loss() != 0 ? fmt::format("{:.4f}", s.loss()) : "-",
        s.tokens_per_s() > 0 ? fmt::format("{:.0f}", s.tokens_per_s()) : "-", eta_text(s),
        s.last_checkpoint_step() > 0 ? fmt::format("{}", s.last_checkpoint_step()) : "-",
        age_text(now_unix_ms() - s.started_unix_ms()), reason);
  }
}

void print_ranks_table(const JobView& view) {
  const v1::JobStatus& s = view.status;
  std::cout << fmt::format("job {}: {}{}{}\n", s.job_id(), s.state(),
                           s.reason().empty() ? "" : " (" + s.reason() + ")",
                           view.live           ? ""
                           : view.note.empty() ? " [from state.json]"
                                               : " [" + view.note + "]");
  if (s.kind() == "train") {
    std::cout << fmt::format(
        "step {}/{}, last checkpoint {}, restarts {}\n", s.step(), s.total_steps(),
        s.last_checkpoint_step() > 0 ? fmt::format("step {}", s.last_checkpoint_step())
                                     : std::string("none"),
        s.restarts());
  }
  // Every attempt but a lone first one: where each started and why it ended.
  if (s.attempts_size() > 1) {
    for (const v1::AttemptSummary& attempt : s.attempts()) {
      std::cout << fmt::format("  attempt {}: {} from step {} to step {}{}\n", attempt.attempt(),
                               attempt.state(), attempt.resumed_from_step(), attempt.last_step(),
                               attempt.reason().empty() ? "" : " (" + attempt.reason() + ")");
    }
  }
  // "memory" counts the model states, activations and buffers the engine
  // accounts for wherever they live; "GPU peak" what the GPU held at most.
  std::cout << fmt::format(
      "{:>5}  {:<20} {:>8} {:<8} {:>9} {:>10} {:>5} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>7}  "
      "{}\n",
      "rank", "host", "pid", "state", "heartbeat", "step", "stage", "step s", "wait s", "memory",
      "peak RSS", "GPU peak", "comm/step", "compr", "exit");
  for (const v1::RankStatus& rank : s.ranks()) {
    const v1::MemoryUsage& m = rank.memory();
    const int64_t memory = m.parameters() + m.gradients() + m.optimizer_states() + m.activations() +
                           m.communication_buffers() + m.gradient_workspace_peak() +
                           m.parameter_workspace_peak() + m.weight_copy();
    std::string exit = "-";
    if (rank.has_exit_code()) exit = fmt::format("code {}", rank.exit_code());
    if (rank.has_exit_signal()) exit = fmt::format("signal {}", rank.exit_signal());
    const auto seconds = [](double value) {
      return value > 0 ? fmt::format("{:.3f}", value) : std::string("-");
    };
    std::cout << fmt::format(
        "{:>5}  {:<20} {:>8} {:<8} {:>9} {:>10} {:>5} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} "
        "{:>7}  {}\n",
        rank.rank(), rank.host().empty() ? "-" : rank.host(), rank.pid(), rank.state(),
        age_text(rank.heartbeat_age_ms()), rank.step(), rank.stage(), seconds(rank.step_time_s()),
        seconds(rank.pipeline_wait_s()), memory > 0 ? core::byte_size_text(memory) : "-",
        m.peak_rss_bytes() > 0 ? core::byte_size_text(m.peak_rss_bytes()) : "-",
        m.peak_device_bytes() > 0 ? core::byte_size_text(m.peak_device_bytes()) : "-",
        rank.comm_bytes() > 0 ? core::byte_size_text(rank.comm_bytes()) : "-",
        rank.compression_ratio() > 0 ? fmt::format("{:.1f}x", rank.compression_ratio()) : "-",
        exit);
  }
}

// The newest logs/attempt_<k> folder of a job.
std::optional<fs::path> latest_attempt(const JobDirectory& directory) {
  std::optional<fs::path> latest;
  int newest = -1;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(fs::path(directory.path()) / "logs", error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("attempt_", 0) != 0) continue;
    const int k = std::atoi(name.c_str() + 8);
    if (k > newest) {
      newest = k;
      latest = entry.path();
    }
  }
  return latest;
}

// A log file read incrementally, line by line.
struct FollowedFile {
  FollowedFile(fs::path file, std::string line_prefix, std::ostream* stream)
      : path(std::move(file)), prefix(std::move(line_prefix)), out(stream) {}

  fs::path path;
  std::string prefix;
  std::ostream* out;
  std::streamoff offset = 0;
  std::string partial;

  bool print_new() {
    std::ifstream file(path, std::ios::binary);
    if (!file) return false;
    file.seekg(offset);
    std::string chunk((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (chunk.empty()) return false;
    offset += static_cast<std::streamoff>(chunk.size());
    partial += chunk;
    size_t start = 0;
    for (size_t newline = partial.find('\n'); newline != std::string::npos;
         newline = partial.find('\n', start)) {
      *out << prefix << std::string_view(partial).substr(start, newline - start) << '\n';
      start = newline + 1;
    }
    partial.erase(0, start);
    out->flush();
    return true;
  }
};

}  // namespace

std::optional<JobDirectory> find_job(const std::string& job, std::string& error) {
  if (fs::is_directory(job) && fs::exists(fs::path(job) / "state.json")) {
    const std::optional<std::string> dir = normalized_job_dir(job, error);
    return dir ? JobDirectory::open(*dir, error) : std::nullopt;
  }
  const std::string root = controller::default_jobs_root();
  std::vector<std::string> matches;
  for (const std::string& dir : controller::list_job_dirs(root)) {
    const std::string id = fs::path(dir).filename().string();
    if (id == job) return JobDirectory::open(dir, error);
    if (id.rfind(job, 0) == 0) matches.push_back(dir);
  }
  if (matches.size() == 1) return JobDirectory::open(matches.front(), error);
  error = matches.empty()
              ? fmt::format("no job '{}' under {} (see `dslaunch list`)", job, root)
              : fmt::format("'{}' matches {} jobs; give more of the job id", job, matches.size());
  return std::nullopt;
}

int run_status_command(const std::optional<std::string>& job, bool json) {
  std::string error;
  if (job) {
    const auto directory = find_job(*job, error);
    const auto view = directory ? view_job(*directory, error) : std::nullopt;
    if (!view) {
      std::cerr << "dslaunch status: " << error << "\n";
      return kBadInput;
    }
    if (json) {
      nlohmann::json out = controller::status_to_json(view->status);
      out["live"] = view->live;
      std::cout << out.dump(2) << "\n";
    } else {
      print_ranks_table(*view);
    }
    return kOk;
  }
  std::vector<JobView> views;
  for (const std::string& dir : controller::list_job_dirs(controller::default_jobs_root())) {
    const auto directory = JobDirectory::open(dir, error);
    if (!directory) continue;
    if (auto view = view_job(*directory, error)) views.push_back(*view);
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const JobView& view : views) {
      nlohmann::json entry = controller::status_to_json(view.status);
      entry["live"] = view.live;
      out.push_back(entry);
    }
    std::cout << out.dump(2) << "\n";
  } else {
    print_jobs_table(views);
  }
  return kOk;
}

int run_list_command() {
  std::string error;
  for (const std::string& dir : controller::list_job_dirs(controller::default_jobs_root())) {
    const auto directory = JobDirectory::open(dir, error);
    const auto state = directory ? directory->read_state(error) : std::nullopt;
    if (!state) continue;
    const v1::JobStatus status = controller::status_from_json(*state);
    std::cout << fmt::format("{:<40} {:<10} {}\n", status.job_id(), status.state(), dir);
  }
  return kOk;
}

int run_stop_command(const std::string& job, bool now) {
  std::string error;
  const auto directory = find_job(job, error);
  const auto view = directory ? view_job(*directory, error) : std::nullopt;
  if (!view) {
    std::cerr << "dslaunch stop: " << error << "\n";
    return kBadInput;
  }
  const v1::JobStatus& status = view->status;
  if (is_final_state(status.state())) {
    std::cout << fmt::format("job {} already ended: {}\n", status.job_id(), status.state());
    return kOk;
  }
  const auto token = directory->read_token(error);
  if (!token) {
    std::cerr << "dslaunch stop: " << error << "\n";
    return kUnreachable;
  }
  proto::ControllerClient client(status.controller_address(), *token, client_options(status));
  v1::StopRequest request;
  request.set_now(now);
  v1::StopReply reply;
  const core::Status stopped = client.stop(request, &reply);
  if (!stopped.ok()) {
    std::cerr << fmt::format("dslaunch stop: the controller at {} did not answer: {}\n",
                             status.controller_address(), stopped.message());
    return kUnreachable;
  }
  std::cout << fmt::format("job {}: {} requested (state {})\n", status.job_id(),
                           now ? "immediate stop" : "graceful stop", reply.state());
  return kOk;
}

std::optional<std::string> resumable_job_dir(const std::string& job, std::string& error) {
  const auto directory = find_job(job, error);
  const auto view = directory ? view_job(*directory, error) : std::nullopt;
  if (!view) return std::nullopt;
  if (view->live) {
    error = fmt::format("job {} is running (state {}); stop it first with `dslaunch stop {}`",
                        view->status.job_id(), view->status.state(), view->status.job_id());
    return std::nullopt;
  }
  if (!std::filesystem::exists(std::filesystem::path(directory->path()) / "spec.yaml")) {
    error = fmt::format("{} has no spec.yaml to resume the job with", directory->path());
    return std::nullopt;
  }
  return directory->path();
}

int run_checkpoint_command(const std::string& job) {
  std::string error;
  const auto directory = find_job(job, error);
  const auto view = directory ? view_job(*directory, error) : std::nullopt;
  if (!view) {
    std::cerr << "dslaunch checkpoint: " << error << "\n";
    return kBadInput;
  }
  const v1::JobStatus& status = view->status;
  if (!view->live) {
    std::cerr << fmt::format("dslaunch checkpoint: job {} is not running ({})\n", status.job_id(),
                             status.state());
    return kUnreachable;
  }
  const auto token = directory->read_token(error);
  if (!token) {
    std::cerr << "dslaunch checkpoint: " << error << "\n";
    return kUnreachable;
  }
  proto::ControllerClient client(status.controller_address(), *token, client_options(status));
  v1::CheckpointReply reply;
  const core::Status asked = client.checkpoint(&reply);
  if (!asked.ok()) {
    std::cerr << fmt::format("dslaunch checkpoint: {}\n", asked.message());
    return asked.code() == core::StatusCode::kFailedPrecondition ? kBadInput : kUnreachable;
  }
  std::cout << fmt::format(
      "job {}: checkpoint requested from {} rank(s) after their next step (last committed: {})\n",
      status.job_id(), reply.ranks_asked(),
      reply.last_checkpoint_step() > 0 ? fmt::format("step {}", reply.last_checkpoint_step())
                                       : std::string("none"));
  return kOk;
}

int run_logs_command(const std::string& job, std::optional<int> rank,
                     std::optional<int> attempt_number, bool follow) {
  std::string error;
  const auto directory = find_job(job, error);
  if (!directory) {
    std::cerr << "dslaunch logs: " << error << "\n";
    return kBadInput;
  }
  std::optional<fs::path> attempt;
  if (attempt_number) {
    attempt = fs::path(directory->path()) / "logs" / fmt::format("attempt_{}", *attempt_number);
    if (!fs::is_directory(*attempt)) {
      const std::optional<fs::path> latest = latest_attempt(*directory);
      std::cerr << fmt::format("dslaunch logs: job {} has no attempt {}{}\n",
                               directory->job_id(), *attempt_number,
                               latest ? " (the latest is " + latest->filename().string() + ")"
                                      : "");
      return kBadInput;
    }
  } else {
    attempt = latest_attempt(*directory);
  }
  if (!attempt) {
    std::cerr << fmt::format("dslaunch logs: job {} has no logs yet\n", directory->job_id());
    return kUnreachable;
  }
  std::vector<FollowedFile> files;
  if (rank) {
    const fs::path folder = *attempt / fmt::format("rank_{}", *rank);
    if (!fs::exists(folder) && !follow) {
      std::cerr << fmt::format("dslaunch logs: no rank {} in {}\n", *rank, attempt->string());
      return kBadInput;
    }
    files.emplace_back(folder / "stdout.log", "", &std::cout);
    files.emplace_back(folder / "stderr.log", "", &std::cerr);
  } else {
    // The controller's log covers every attempt of the job.
    files.emplace_back(fs::path(directory->path()) / "logs" / "controller.log", "controller | ",
                       &std::cout);
    files.emplace_back(*attempt / "launcher.stdout.log", "launcher | ", &std::cout);
    files.emplace_back(*attempt / "launcher.stderr.log", "launcher | ", &std::cout);
    std::map<int, fs::path> ranks;
    std::error_code ignored;
    for (const auto& entry : fs::directory_iterator(*attempt, ignored)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("rank_", 0) == 0) ranks[std::atoi(name.c_str() + 5)] = entry.path();
    }
    for (const auto& [r, folder] : ranks) {
      files.emplace_back(folder / "stdout.log", fmt::format("rank {} | ", r), &std::cout);
      files.emplace_back(folder / "stderr.log", fmt::format("rank {} | ", r), &std::cout);
    }
  }
  for (FollowedFile& file : files) file.print_new();
  while (follow) {
    bool grew = false;
    for (FollowedFile& file : files) grew = file.print_new() || grew;
    if (!grew) {
      const auto state = directory->read_state(error);
      if (state && is_final_state(controller::status_from_json(*state).state())) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  return kOk;
}

}  // namespace dslaunch::launcher
