#pragma once

#include <chrono>
#include <string>

#include "launcher/controller/progress.h"
#include "core/spec/spec_parser.h"

namespace dslaunch::controller {

struct RunOptions {
  std::string spec_path;
  spec::LoadOptions load;
  std::string job_dir;        // "" = <jobs root>/<new job id>
  std::string worker_binary;  // "" = the dsworker beside this dslaunch
  ProgressDisplay::Mode progress = ProgressDisplay::Mode::kPlain;
  // After SIGTERM, how long the launcher and ranks get before SIGKILL.
  std::chrono::milliseconds termination_grace{10'000};
  // How long every rank has to register after the launcher started.
  std::chrono::milliseconds registration_timeout{120'000};
};

// Exit codes of `dslaunch run`.
inline constexpr int kRunSucceeded = 0;
inline constexpr int kRunFailed = 1;
inline constexpr int kRunBadInput = 2;
inline constexpr int kRunStopped = 3;

// `dslaunch run`: plans the job, creates its directory and token, starts the
// controller's gRPC server and the ranks through the spec's runner, and
// watches them until the job succeeds, fails or is stopped. A rank that
// exits non-zero, reports an error, or falls silent past the heartbeat
// timeout fails the attempt: every process of the job is then stopped
// (SIGTERM, then SIGKILL after the grace period) and the first failure is
// recorded as the root cause. SIGINT or SIGTERM to this process stops the
// job (a second one kills it at once); no rank or launcher outlives it.
// Blocks; returns one of the exit codes above.
int run_job(const RunOptions& options);

}  // namespace dslaunch::controller
