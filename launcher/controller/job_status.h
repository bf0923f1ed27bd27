#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/controller/job_state.h"
#include "proto/dslaunch.pb.h"

namespace dslaunch::controller {

// What stays the same for the life of a job.
struct JobInfo {
  std::string job_id;
  std::string name;
  std::string kind;  // "train" or "commbench"
  int world_size = 0;
  std::vector<int> stage_of_rank;  // each rank's pipeline stage (empty: all 0)
  int64_t total_steps = 0;         // 0 when not known in advance
  std::string controller_address;
  std::string tls_ca;  // "" when the control plane is plaintext
  int64_t started_unix_ms = 0;
  int controller_pid = 0;
  std::string controller_host;  // gethostname()
};

// The job as `dslaunch status` shows it, from the controller's state now.
v1::JobStatus make_job_status(const JobInfo& info, const JobState& state, const Clock& clock,
                              int attempt, int restarts, int64_t now_unix_ms);

// One JSON shape for the job's status everywhere: state.json, `status
// --json`, and the live answer. Integers stay JSON numbers (protobuf's own
// JSON mapping would turn 64-bit ones into strings).
nlohmann::json status_to_json(const v1::JobStatus& status);
// The reverse, for a state.json written by this or an older dslaunch:
// missing keys keep their defaults.
v1::JobStatus status_from_json(const nlohmann::json& json);

}  // namespace dslaunch::controller
