#include "launcher/runner/failure_report.h"

#include <signal.h>

#include <charconv>
#include <regex>
#include <string>

namespace dslaunch::runner {
namespace {

int to_int(const std::string& digits) {
  int value = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), value);
  return value;
}

}  // namespace

std::optional<LauncherFailure> FailureReportReader::read_line(std::string_view text) {
  static const std::regex mpirun_signal(
      R"(mpirun noticed that process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))");
  static const std::regex mpirun_process(R"(^\s*Process name:\s*\[\[\d+,\d+\],(\d+)\])");
  static const std::regex mpirun_code(R"(^\s*Exit code:\s*(\d+))");
  static const std::regex srun_code(
      R"(srun: error: \S+: tasks? (\d+)[^:]*: Exited with exit code (\d+))");
  static const std::regex srun_signal(
      R"(srun: error: \S+: tasks? (\d+)[^:]*: (Killed|Terminated|Segmentation fault|Aborted))");
  const std::string line(text);
  std::smatch match;
  if (std::regex_search(line, match, mpirun_signal)) {
    return LauncherFailure{to_int(match[1]), std::nullopt, to_int(match[2])};
  }
  if (std::regex_search(line, match, mpirun_process)) {
    pending_rank_ = to_int(match[1]);
    return std::nullopt;
  }
  if (pending_rank_ && std::regex_search(line, match, mpirun_code)) {
    const LauncherFailure failure{*pending_rank_, to_int(match[1]), std::nullopt};
    pending_rank_.reset();
    return failure;
  }
  if (std::regex_search(line, match, srun_code)) {
    return LauncherFailure{to_int(match[1]), to_int(match[2]), std::nullopt};
  }
  if (std::regex_search(line, match, srun_signal)) {
    const std::string name = match[2];
    const int signal = name == "Killed"       ? SIGKILL
                       : name == "Terminated" ? SIGTERM
                       : name == "Aborted"    ? SIGABRT
                                              : SIGSEGV;
    return LauncherFailure{to_int(match[1]), std::nullopt, signal};
  }
  return std::nullopt;
}

}  // namespace dslaunch::runner
