#include "launcher/runner/supervised_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/errno_status.h"

namespace dslaunch::runner {
namespace {

// The session id from /proc/<pid>/stat: the sixth field, after "(comm)",
// which may itself hold spaces and parentheses.
std::optional<pid_t> session_of(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::string state;
  pid_t ppid = 0, pgrp = 0, session = 0;
  if (!(fields >> state >> ppid >> pgrp >> session)) return std::nullopt;
  if (state == "Z") return std::nullopt;  // a zombie is already gone
  return session;
}

// A pidfd for `pid` (Linux 5.3 and later), or -1 with errno set.
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

bool send_through_pidfd(int pidfd, int signal) {
#ifdef SYS_pidfd_send_signal
  return syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0) == 0;
#else
  (void)pidfd;
  (void)signal;
  return false;
#endif
}

}  // namespace

std::string ExitStatus::to_string() const {
  if (code) return fmt::format("exit code {}", *code);
  if (signal) return fmt::format("signal {} ({})", *signal, strsignal(*signal));
  return "still running";
}

std::vector<pid_t> processes_in_session(pid_t session) {
  std::vector<pid_t> pids;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return pids;
  while (const dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    if (session_of(static_cast<pid_t>(pid)) == session) pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return pids;
}

bool signal_session_member(pid_t pid, pid_t session, int signal) {
  const int pidfd = open_pidfd(pid);
  if (pidfd < 0 && errno == ESRCH) return false;  // gone already
  // Checked after the pidfd is open: if `pid` was reused before that, the
  // check sees the newcomer and fails; if after, the pidfd still names the
  // member, which is then gone, and the signal goes nowhere.
  if (session_of(pid) != session) {
    if (pidfd >= 0) close(pidfd);
    return false;
  }
  // No pidfd (an old kernel, or a sandbox that forbids it): the check just
  // above leaves only a short window.
  if (pidfd < 0) return kill(pid, signal) == 0;
  const bool sent = send_through_pidfd(pidfd, signal);
  close(pidfd);
  return sent;
}

std::unique_ptr<SupervisedProcess> SupervisedProcess::start(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment,
    std::string& error) {
  if (argv.empty()) {
    error = "no command to start";
    return nullptr;
  }
  int out[2], err[2], exec_status[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(exec_status, O_CLOEXEC) != 0) {
    error = fmt::format("cannot create pipes: {}", core::errno_text(errno));
    return nullptr;
  }
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls are allowed.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (environment.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : environment) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp, args;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    error = fmt::format("cannot fork: {}", core::errno_text(errno));
    return nullptr;
  }
  if (pid == 0) {
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the controller died before prctl
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvpe(args[0], args.data(), envp.data());
    const int exec_errno = errno;
    (void)!write(exec_status[1], &exec_errno, sizeof(exec_errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  close(exec_status[1]);
  int exec_errno = 0;
  const ssize_t n = read(exec_status[0], &exec_errno, sizeof(exec_errno));
  close(exec_status[0]);
  if (n == sizeof(exec_errno)) {
    waitpid(pid, nullptr, 0);
    close(out[0]);
    close(err[0]);
    error = fmt::format("cannot start '{}': {}", argv[0], core::errno_text(exec_errno));
    return nullptr;
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  return std::unique_ptr<SupervisedProcess>(new SupervisedProcess(pid, out[0], err[0]));
}

SupervisedProcess::~SupervisedProcess() {
  // Also when the launcher has exited: ranks it left in the session are
  // killed, and its zombie is reaped.
  if (!reaped_) terminate(std::chrono::milliseconds(0));
  for (int& fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

bool SupervisedProcess::pump_output(RankOutput& output, std::chrono::milliseconds timeout) {
  std::array<pollfd, 2> polled{};
  int open = 0;
  for (int i = 0; i < 2; ++i) {
    polled[i] = {fds_[i], POLLIN, 0};
    if (fds_[i] >= 0) ++open;
  }
  if (open == 0) return false;
  if (poll(polled.data(), polled.size(), static_cast<int>(timeout.count())) <= 0) return true;
  std::array<char, 65536> buffer{};
  for (int i = 0; i < 2; ++i) {
    if (fds_[i] < 0 || polled[i].revents == 0) continue;
    const ssize_t n = read(fds_[i], buffer.data(), buffer.size());
    const OutputStream stream = i == 0 ? OutputStream::kStdout : OutputStream::kStderr;
    if (n > 0) {
      output.feed(stream, std::string_view(buffer.data(), static_cast<size_t>(n)));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(fds_[i]);
      fds_[i] = -1;
    }
  }
  return fds_[0] >= 0 || fds_[1] >= 0;
}

std::optional<ExitStatus> SupervisedProcess::poll_exit() {
  if (exit_) return exit_;
  siginfo_t info{};
  // WNOWAIT reads the status and leaves the zombie (see the class comment).
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != pid_) {
    return std::nullopt;
  }
  ExitStatus result;
  if (info.si_code == CLD_EXITED) {
    result.code = info.si_status;
  } else {
    result.signal = info.si_status;
  }
  exit_ = result;
  return exit_;
}

std::vector<pid_t> SupervisedProcess::session_processes() const {
  return processes_in_session(pid_);
}

void SupervisedProcess::kill_session(int signal) const {
  for (const pid_t pid : session_processes()) signal_session_member(pid, pid_, signal);
}

ExitStatus SupervisedProcess::terminate(std::chrono::milliseconds grace) {
  using Clock = std::chrono::steady_clock;
  if (reaped_) return *exit_;
  if (!poll_exit()) kill(pid_, SIGTERM);
  const auto kill_at = Clock::now() + grace;
  const auto give_up = kill_at + std::chrono::seconds(5);
  bool killed = false;
  while (Clock::now() < give_up) {
    poll_exit();
    const bool any_left = !session_processes().empty();
    if (exit_ && !any_left) break;
    if (!killed && Clock::now() >= kill_at) {
      // SIGKILL also ends stopped (SIGSTOP) processes, which SIGTERM cannot.
      kill_session(SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!exit_) {
    siginfo_t ignored{};
    waitid(P_PID, static_cast<id_t>(pid_), &ignored, WEXITED | WNOWAIT);
    poll_exit();
  }
  // Done with the session id: the launcher's pid may now be reused.
  waitpid(pid_, nullptr, 0);
  reaped_ = true;
  return exit_.value_or(ExitStatus{});
}

}  // namespace dslaunch::runner
