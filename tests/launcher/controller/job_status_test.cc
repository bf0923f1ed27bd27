#include "launcher/controller/job_status.h"

#include <catch2/catch.hpp>

namespace dslaunch::controller {
namespace {

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

  const nlohmann::json json = status_to_json(status);
  CHECK(json["ranks"][0]["memory"]["gradient_workspace_peak"] == 6);
  CHECK(json["ranks"][0]["memory"]["parameter_workspace_peak"] == 7);
  const v1::JobStatus back = status_from_json(json);
  REQUIRE(back.ranks_size() == 1);
  const v1::MemoryUsage& read = back.ranks(0).memory();
  CHECK(read.parameters() == 1);
  CHECK(read.gradients() == 2);
  CHECK(read.optimizer_states() == 3);
  CHECK(read.activations() == 4);
  CHECK(read.communication_buffers() == 5);
  CHECK(read.gradient_workspace_peak() == 6);
  CHECK(read.parameter_workspace_peak() == 7);
  CHECK(back.loss() == 1.25);
}

}  // namespace
}  // namespace dslaunch::controller
