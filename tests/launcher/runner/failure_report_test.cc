#include "launcher/runner/failure_report.h"

#include <signal.h>

#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::runner {
namespace {

std::vector<LauncherFailure> read_all(const std::string& text) {
  FailureReportReader reader;
  std::vector<LauncherFailure> failures;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (auto failure = reader.read_line(line)) failures.push_back(*failure);
  }
  return failures;
}

}  // namespace

TEST_CASE("mpirun's report of a rank exiting non-zero gives the rank and code") {
  // As Open MPI 4.1 prints it.
  const auto failures =
      read_all(R"(--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[14070,1],1]
  Exit code:    3
--------------------------------------------------------------------------
)");
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].rank == 1);
  CHECK(failures[0].exit_code == 3);
  CHECK_FALSE(failures[0].signal);
}

TEST_CASE("mpirun's report of a rank killed by a signal gives the rank and signal") {
  const auto failures = read_all(
      "mpirun noticed that process rank 12 with PID 0 on node vm exited on signal 9 (Killed).\n");
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].rank == 12);
  CHECK(failures[0].signal == 9);
  CHECK_FALSE(failures[0].exit_code);
}

TEST_CASE("srun's reports give the task and its code or signal") {
  const auto failures = read_all(
      "srun: error: node03: task 5: Exited with exit code 2\n"
      "srun: error: node01: task 1: Killed\n"
      "srun: error: node02: tasks 2-3: Terminated\n");
  REQUIRE(failures.size() == 3);
  CHECK(failures[0].rank == 5);
  CHECK(failures[0].exit_code == 2);
  CHECK(failures[1].rank == 1);
  CHECK(failures[1].signal == SIGKILL);
  CHECK(failures[2].rank == 2);
  CHECK(failures[2].signal == SIGTERM);
}

TEST_CASE("ordinary lines report nothing, and an exit code needs its process name") {
  CHECK(read_all("  Exit code:    3\nhello\n[1,0]<stdout>:Exit code: 4\n").empty());
}

}  // namespace dslaunch::runner
