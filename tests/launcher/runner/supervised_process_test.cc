#include "launcher/runner/supervised_process.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <catch2/catch.hpp>

namespace dslaunch::runner {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool alive(pid_t pid) { return kill(pid, 0) == 0; }

// The state letter of `pid` in /proc/<pid>/stat ('Z' for a zombie), or ' '
// when there is no such process.
char state_of(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return ' ';
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? ' ' : line[close + 2];
}

// Runs the process to its end, collecting untagged output (the launcher log).
struct Collected {
  ExitStatus status;
  std::string stdout_text;
  std::string stderr_text;
};

Collected run_to_end(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& environment = {}) {
  std::string error;
  auto process = SupervisedProcess::start(argv, environment, error);
  REQUIRE(process != nullptr);
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / fmt::format("run{}", process->pid());
  fs::create_directories(dir);
  RankOutput output(OutputTags::kMpirun, [&](int, OutputStream stream) {
    return (dir / (stream == OutputStream::kStdout ? "out" : "err")).string();
  });
  while (process->pump_output(output, 100ms)) {
  }
  output.finish();
  Collected collected;
  while (!process->poll_exit()) std::this_thread::sleep_for(10ms);
  collected.status = *process->poll_exit();
  const auto read = [](const fs::path& path) {
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  };
  collected.stdout_text = read(dir / "out");
  collected.stderr_text = read(dir / "err");
  return collected;
}

// Waits until `pids_file` lists `count` pids (written by the child script).
std::vector<pid_t> wait_for_pids(const fs::path& pids_file, size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream file(pids_file);
    std::vector<pid_t> pids;
    pid_t pid = 0;
    while (file >> pid) pids.push_back(pid);
    if (pids.size() >= count) return pids;
    std::this_thread::sleep_for(20ms);
  }
  FAIL("the child did not report its pids");
  return {};
}

}  // namespace

TEST_CASE("the exit code, output and environment of the launcher come through") {
  const Collected collected =
      run_to_end({"sh", "-c", "echo out $GREETING; echo err >&2; exit 3"}, {{"GREETING", "hello"}});
  CHECK(collected.status.code == 3);
  CHECK_FALSE(collected.status.signal);
  CHECK(collected.stdout_text == "out hello\n");
  CHECK(collected.stderr_text == "err\n");
  CHECK(collected.status.to_string() == "exit code 3");
}

TEST_CASE("a launcher ended by a signal reports the signal") {
  const Collected collected = run_to_end({"sh", "-c", "kill -9 $$"});
  CHECK(collected.status.signal == SIGKILL);
  CHECK(collected.status.to_string() == "signal 9 (Killed)");
}

TEST_CASE("a program that does not exist is an error, not a process") {
  std::string error;
  const auto process = SupervisedProcess::start({"no-such-launcher-xyz"}, {}, error);
  CHECK(process == nullptr);
  CHECK(error == "cannot start 'no-such-launcher-xyz': No such file or directory");
}

TEST_CASE("terminate reaches children in their own process groups and ones ignoring SIGTERM") {
  const fs::path pids = fs::path(std::getenv("TEST_TMPDIR")) / "pids_terminate";
  fs::remove(pids);
  // A child in its own process group (as Open MPI puts its ranks), one that
  // ignores SIGTERM, and one stopped as a hung rank would be.
  const std::string script = fmt::format(
      "set -m; sleep 300 & echo $! >> {0}; "
      "(trap '' TERM; exec sleep 300) & echo $! >> {0}; "
      "sleep 300 & echo $! >> {0}; kill -STOP $!; wait",
      pids.string());
  std::string error;
  auto process = SupervisedProcess::start({"sh", "-c", script}, {}, error);
  REQUIRE(process != nullptr);
  const std::vector<pid_t> children = wait_for_pids(pids, 3);
  const auto session = process->session_processes();
  for (const pid_t child : children) {
    CHECK(std::find(session.begin(), session.end(), child) != session.end());
  }
  const auto started = std::chrono::steady_clock::now();
  process->terminate(500ms);
  CHECK(std::chrono::steady_clock::now() - started < 6s);
  for (const pid_t child : children) {
    INFO(child);
    CHECK_FALSE(alive(child));
  }
  CHECK(process->session_processes().empty());
}

TEST_CASE("a graceful launcher exits on SIGTERM within the grace period") {
  std::string error;
  auto process = SupervisedProcess::start(
      {"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.05; done"}, {}, error);
  REQUIRE(process != nullptr);
  std::this_thread::sleep_for(200ms);
  const ExitStatus status = process->terminate(10s);
  CHECK(status.code == 0);
}

TEST_CASE("an exited launcher stays a zombie, holding its session id, until its session is killed") {
  const fs::path pids = fs::path(std::getenv("TEST_TMPDIR")) / "pids_zombie";
  fs::remove(pids);
  // The launcher exits at once and leaves a "rank" behind in its session.
  std::string error;
  auto process = SupervisedProcess::start(
      {"sh", "-c", fmt::format("sleep 300 & echo $! >> {}; exit 0", pids.string())}, {}, error);
  REQUIRE(process != nullptr);
  const pid_t launcher = process->pid();
  const pid_t rank = wait_for_pids(pids, 1).front();
  while (!process->poll_exit()) std::this_thread::sleep_for(10ms);
  CHECK(process->poll_exit()->code == 0);
  // Not reaped: no new process can take the pid, so none can lead a new
  // session with this id.
  CHECK(state_of(launcher) == 'Z');
  CHECK(process->session_processes() == std::vector<pid_t>{rank});
  process.reset();
  CHECK(state_of(rank) == ' ');
  CHECK(state_of(launcher) == ' ');  // reaped once its session was killed
}

TEST_CASE("a process is signalled as a session member only while it is one") {
  std::string error;
  auto process = SupervisedProcess::start({"sleep", "300"}, {}, error);
  REQUIRE(process != nullptr);
  const pid_t sleeper = process->pid();
  // This test's own process is not in the launcher's session.
  CHECK_FALSE(signal_session_member(getpid(), sleeper, SIGKILL));
  CHECK_FALSE(signal_session_member(sleeper, getsid(0), SIGKILL));
  CHECK(state_of(sleeper) != 'Z');
  CHECK(alive(sleeper));
  CHECK(signal_session_member(sleeper, sleeper, SIGKILL));
  while (!process->poll_exit()) std::this_thread::sleep_for(10ms);
  CHECK(process->poll_exit()->signal == SIGKILL);
  process->terminate(0ms);
  CHECK_FALSE(signal_session_member(sleeper, sleeper, SIGKILL));  // reaped: gone
}

}  // namespace dslaunch::runner
