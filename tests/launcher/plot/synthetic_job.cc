#include "tests/launcher/plot/synthetic_job.h"

#include <optional>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "launcher/controller/job_directory.h"
#include "launcher/controller/job_status.h"

namespace dslaunch::plot::testing {
namespace {

constexpr int kResumedFrom = 8;

void event(controller::JobDirectory& job, int rank, const std::string& kind,
           const std::string& detail) {
  std::string error;
  const bool appended = job.append_event(rank, kind, detail, error);
  INFO(error);
  REQUIRE(appended);
}

// The metrics lines of `rank` for one step, as the controller's handler
// writes them (time_ms, rank, step and the rank's metrics).
void step_metrics(controller::JobDirectory& job, int attempt, int rank, int step) {
  nlohmann::json line = {{"time_ms", 1795664126095 + 1000 * attempt + step},
                         {"rank", rank},
                         {"step", step},
                         {"loss", rank == 0 ? synthetic_loss(attempt, step) : 100.0},
                         {"lr", 0.001 * step / 20.0},
                         {"grad_norm", 2.0 + attempt},
                         {"step_time_s", 0.5},
                         {"tokens_per_s", 250.0 + 10 * attempt + step},
                         {"tflops", 0.016}};
  if (step % 5 == 0) line["eval_loss"] = synthetic_loss(attempt, step) + 0.25;
  std::string error;
  const bool appended = job.append_metrics(line, error);
  INFO(error);
  REQUIRE(appended);
}

// Every rank's memory report, once after the first step of an attempt.
void memory_metrics(controller::JobDirectory& job, int rank) {
  const nlohmann::json line = {
      {"time_ms", 1795664126095}, {"rank", rank},          {"step", 0}, {"what", "memory"},
      {"parameters_bytes", 1e6},  {"gradients_bytes", 1e6}};
  std::string error;
  const bool appended = job.append_metrics(line, error);
  INFO(error);
  REQUIRE(appended);
}

void run_attempt(controller::JobDirectory& job, int attempt, int first_step, int last_step) {
  event(job, -1, "controller_started", "127.0.0.1:40000");
  event(job, -1, "launching", "mpirun -np 2 dsworker run");
  event(job, -1, "launcher_started", "pid 1234");
  for (int rank : {1, 0}) event(job, rank, "registered", "localhost pid 1235 cpu");
  for (int step = first_step; step <= last_step; ++step) {
    for (int rank : {0, 1}) {
      step_metrics(job, attempt, rank, step);
      if (step == first_step) memory_metrics(job, rank);
    }
    if (step == kResumedFrom && attempt == 0) {
      for (int rank : {1, 0}) event(job, rank, "checkpoint_written", "step 8");
      event(job, -1, "checkpoint_committed",
            fmt::format("step 8: {}/checkpoints/step_00000008", job.path()));
    }
  }
}

}  // namespace

double synthetic_loss(int attempt, int step) { return 6.0 - 0.125 * step - 0.5 * attempt; }

std::string write_two_attempt_job(const std::string& root, const std::string& job_id,
                                  const std::string& name) {
  std::string error;
  std::optional<controller::JobDirectory> job =
      controller::JobDirectory::create(root, job_id, error);
  INFO(error);
  REQUIRE(job);

  v1::JobStatus status;
  status.set_job_id(job_id);
  status.set_name(name);
  status.set_kind("train");
  status.set_world_size(2);
  status.set_total_steps(20);
  v1::AttemptSummary* first = status.add_attempts();
  first->set_attempt(0);
  first->set_resumed_from_step(0);

  run_attempt(*job, 0, 1, 12);
  const std::string reason = "rank 1 exited with code 1";
  event(*job, 1, "error", "injected failure");
  event(*job, -1, "failure_detected", reason);
  event(*job, -1, "terminating", "SIGTERM to the launcher, then SIGKILL");
  event(*job, -1, "launcher_exited", "exit code 1");
  event(*job, -1, "finished", "FAILED: " + reason);
  first->set_state("FAILED");
  first->set_reason(reason);
  first->set_last_step(12);

  v1::AttemptSummary* second = status.add_attempts();
  second->set_attempt(1);
  second->set_resumed_from_step(kResumedFrom);
  run_attempt(*job, 1, kResumedFrom + 1, 20);
  event(*job, -1, "launcher_exited", "exit code 0");
  event(*job, -1, "finished", "SUCCEEDED");
  second->set_state("SUCCEEDED");
  second->set_last_step(20);

  status.set_attempt(1);
  status.set_restarts(1);
  status.set_state("SUCCEEDED");
  status.set_step(20);
  status.set_last_checkpoint_step(kResumedFrom);
  const bool written = job->write_state(controller::status_to_json(status), error);
  INFO(error);
  REQUIRE(written);
  return job->path();
}

}  // namespace dslaunch::plot::testing
