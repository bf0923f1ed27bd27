#include "launcher/controller/job_status.h"

#include <catch2/catch.hpp>

#include "launcher/controller/job_state.h"

namespace dslaunch::controller {
namespace {

// A clock that stands still.
class StillClock final : public Clock {
 public:
  TimePoint now() const override { return TimePoint{} + std::chrono::seconds(1000); }
};

TEST_CASE("state.json keeps every rank's memory by kind, workspace peaks included") {
  v1::JobStatus status;
  status.set_job_id("job-1");
  status.set_loss(1.25);
  v1::RankStatus* rank = status.add_ranks();
  rank->set_rank(0);
  v1::MemoryUsage* memory = rank->mutable_memory();
  memory->set_parameters(1);
  memory->set_gradients(2);
  memory->set_optimizer_states(3);
  memory->set_activations(4);
  memory->set_communication_buffers(5);
  memory->set_gradient_workspace_peak(6);
  memory->set_parameter_workspace_peak(7);
  memory->set_weight_copy(8);
  memory->set_rss_bytes(8);
  memory->set_peak_rss_bytes(9);
  memory->set_peak_device_bytes(10);

  const nlohmann::json json = status_to_json(status);
  CHECK(json["ranks"][0]["memory"]["gradient_workspace_peak"] == 6);
  CHECK(json["ranks"][0]["memory"]["parameter_workspace_peak"] == 7);
  CHECK(json["ranks"][0]["memory"]["weight_copy"] == 8);
  CHECK(json["ranks"][0]["memory"]["peak_rss_bytes"] == 9);
  CHECK(json["ranks"][0]["memory"]["peak_device_bytes"] == 10);
  const v1::JobStatus back = status_from_json(json);
  REQUIRE(back.ranks_size() == 1);
  const v1::MemoryUsage& read = back.ranks(0).memory();
  CHECK(read.parameters() == 1);
  CHECK(read.gradients() == 2);
  CHECK(read.optimizer_states() == 3);
  CHECK(read.activations() == 4);
  CHECK(read.rss_bytes() == 8);
  CHECK(read.peak_rss_bytes() == 9);
  CHECK(read.communication_buffers() == 5);
  CHECK(read.gradient_workspace_peak() == 6);
  CHECK(read.parameter_workspace_peak() == 7);
  CHECK(read.weight_copy() == 8);
  CHECK(read.peak_device_bytes() == 10);
  CHECK(back.loss() == 1.25);
}

TEST_CASE("every rank's pipeline stage, step time and wait reach state.json and back") {
  v1::JobStatus status;
  v1::RankStatus* rank = status.add_ranks();
  rank->set_rank(3);
  rank->set_stage(1);
  rank->set_step_time_s(0.5);
  rank->set_pipeline_wait_s(0.125);
  const nlohmann::json json = status_to_json(status);
  CHECK(json["ranks"][0]["stage"] == 1);
  CHECK(json["ranks"][0]["step_time_s"] == 0.5);
  const v1::JobStatus back = status_from_json(json);
  REQUIRE(back.ranks_size() == 1);
  CHECK(back.ranks(0).stage() == 1);
  CHECK(back.ranks(0).step_time_s() == 0.5);
  CHECK(back.ranks(0).pipeline_wait_s() == 0.125);
}

TEST_CASE("the live status names each rank's stage and its last step's time") {
  JobInfo info;
  info.world_size = 2;
  info.stage_of_rank = {0, 1};
  StillClock clock;
  JobState state(2, FailureTimeouts{}, clock);
  v1::Heartbeat heartbeat;
  heartbeat.set_step(7);
  heartbeat.set_step_time_s(0.25);
  heartbeat.set_pipeline_wait_s(0.05);
  state.on_register(1, "host", 42, "cpu");
  state.on_heartbeat(1, heartbeat);
  const v1::JobStatus status = make_job_status(info, state, clock, 0, 0, 0);
  REQUIRE(status.ranks_size() == 2);
  CHECK(status.ranks(1).stage() == 1);
  CHECK(status.ranks(1).step_time_s() == 0.25);
  CHECK(status.ranks(1).pipeline_wait_s() == 0.05);
}

}  // namespace
}  // namespace dslaunch::controller
