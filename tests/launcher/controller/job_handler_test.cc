#include "launcher/controller/job_handler.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace dslaunch::controller {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  SteadyClock clock;
  JobState state{2, FailureTimeouts{}, clock};
  std::optional<JobDirectory> directory;
  std::unique_ptr<JobHandler> handler;

  Fixture() {
    static int counter = 0;
    std::string error;
    directory = JobDirectory::create(std::getenv("TEST_TMPDIR"),
                                     "handler" + std::to_string(counter++), error);
    REQUIRE(directory);
    JobInfo info;
    info.job_id = "job-1";
    info.name = "bench";
    info.kind = "commbench";
    info.world_size = 2;
    JobHandler::Attempt attempt;
    attempt.number = 0;
    attempt.heartbeat_interval_ms = 500;
    attempt.resolved_spec_yaml = "kind: commbench\n";
    for (int rank = 0; rank < 2; ++rank) {
      v1::RankPlacement placement;
      placement.set_rank(rank);
      placement.set_world_size(2);
      placement.add_cpu_cores(rank);
      attempt.placements.push_back(placement);
    }
    attempt.grid.set_pipeline(1);
    attempt.grid.set_data(2);
    attempt.grid.set_tensor(1);
    attempt.batch.set_train_batch_size(16);
    attempt.batch.set_micro_batch_per_gpu(4);
    attempt.batch.set_gradient_accumulation_steps(2);
    handler = std::make_unique<JobHandler>(info, attempt, state, *directory, clock);
    state.start();
  }

  grpc::Status register_rank(int rank, int attempt, v1::RegisterReply* reply) {
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_restart_count(attempt);
    request.set_host("node1");
    request.set_pid(100 + rank);
    return handler->register_rank(request, reply);
  }

  std::vector<nlohmann::json> lines(const char* file) const {
    std::ifstream in(fs::path(directory->path()) / file);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
    return out;
  }
};

}  // namespace

TEST_CASE("registration hands each rank the spec, its placement, the plan's grid and batch, and "
          "the heartbeat interval") {
  Fixture f;
  v1::RegisterReply reply;
  REQUIRE(f.register_rank(1, 0, &reply).ok());
  CHECK(reply.job_id() == "job-1");
  CHECK(reply.grid().pipeline() == 1);
  CHECK(reply.grid().data() == 2);
  CHECK(reply.grid().tensor() == 1);
  CHECK(reply.batch().train_batch_size() == 16);
  CHECK(reply.batch().micro_batch_per_gpu() == 4);
  CHECK(reply.batch().gradient_accumulation_steps() == 2);
  CHECK(reply.resolved_spec_yaml() == "kind: commbench\n");
  CHECK(reply.placement().rank() == 1);
  CHECK(reply.placement().cpu_cores(0) == 1);
  CHECK(reply.heartbeat_interval_ms() == 500);
  CHECK(f.lines("events.jsonl").back()["kind"] == "registered");
  REQUIRE(f.register_rank(0, 0, &reply).ok());
  CHECK(f.state.phase() == JobPhase::kRunning);
}

TEST_CASE("a rank of another attempt, or registering twice, is refused") {
  Fixture f;
  v1::RegisterReply reply;
  CHECK(f.register_rank(0, 3, &reply).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  REQUIRE(f.register_rank(0, 0, &reply).ok());
  CHECK(f.register_rank(0, 0, &reply).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(f.register_rank(5, 0, &reply).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("metrics go to metrics.jsonl and an error event fails the job with it") {
  Fixture f;
  v1::RegisterReply reply;
  REQUIRE(f.register_rank(0, 0, &reply).ok());
  v1::WorkerMessage metrics;
  metrics.set_rank(0);
  metrics.mutable_event()->set_kind(v1::WorkerEvent::KIND_STEP_METRICS);
  metrics.mutable_event()->set_step(7);
  metrics.mutable_event()->set_message("world all_reduce");
  (*metrics.mutable_event()->mutable_metrics())["busbw_gbs"] = 1.5;
  f.handler->worker_message(metrics);
  const auto written = f.lines("metrics.jsonl");
  REQUIRE(written.size() == 1);
  CHECK(written[0]["step"] == 7);
  CHECK(written[0]["what"] == "world all_reduce");
  CHECK(written[0]["busbw_gbs"] == 1.5);

  v1::WorkerMessage error;
  error.set_rank(0);
  error.mutable_event()->set_kind(v1::WorkerEvent::KIND_ERROR);
  error.mutable_event()->set_message("commbench: 2 measurement(s) gave wrong results");
  f.handler->worker_message(error);
  CHECK(f.state.phase() == JobPhase::kFailed);
  CHECK(f.handler->status_now().reason().find("2 measurement(s) gave wrong results") !=
        std::string::npos);
}

TEST_CASE("a session that ends before its rank finished is reported lost") {
  Fixture f;
  v1::WorkerMessage finished;
  finished.set_rank(1);
  finished.mutable_heartbeat()->set_phase(v1::PHASE_FINISHED);
  v1::RegisterReply reply;
  REQUIRE(f.register_rank(1, 0, &reply).ok());
  f.handler->worker_message(finished);
  f.handler->session_closed(1);
  f.handler->session_closed(0);
  CHECK(f.handler->sessions_lost() == std::vector<int>{0});
}

TEST_CASE("stop --now is flagged for the controller; a graceful stop is recorded") {
  Fixture f;
  v1::StopRequest request;
  v1::StopReply reply;
  REQUIRE(f.handler->stop(request, &reply).ok());
  CHECK_FALSE(f.handler->stop_now_requested());
  CHECK(f.state.stop_requested());
  request.set_now(true);
  REQUIRE(f.handler->stop(request, &reply).ok());
  CHECK(f.handler->stop_now_requested());
  const auto events = f.lines("events.jsonl");
  REQUIRE(events.size() == 2);
  CHECK(events[0]["detail"] == "graceful");
  CHECK(events[1]["detail"] == "now");
}

namespace {

// The commands a rank's session was sent.
struct RecordingSink : CommandSink {
  std::vector<v1::ControllerCommand::Kind> sent;
  bool send(const v1::ControllerCommand& command) override {
    sent.push_back(command.kind());
    return true;
  }
};

}  // namespace

TEST_CASE("a graceful stop reaches the sessions open and those opened after it") {
  Fixture f;
  auto early = std::make_shared<RecordingSink>();
  f.handler->session_opened(0, early);
  CHECK(early->sent.empty());
  v1::StopRequest request;
  v1::StopReply reply;
  REQUIRE(f.handler->stop(request, &reply).ok());
  CHECK(early->sent == std::vector{v1::ControllerCommand::KIND_STOP});
  // Rank 1 was still starting when the stop was asked for.
  auto late = std::make_shared<RecordingSink>();
  f.handler->session_opened(1, late);
  CHECK(late->sent == std::vector{v1::ControllerCommand::KIND_STOP});
  CHECK(early->sent.size() == 1);
}

}  // namespace dslaunch::controller
