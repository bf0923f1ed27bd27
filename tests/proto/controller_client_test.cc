// The typed client against the real ControllerServer over loopback gRPC, with
// a fake handler that records what reached it.
#include "proto/controller_client.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include "core/status.h"
#include "launcher/controller/controller_handler.h"
#include "launcher/controller/controller_server.h"
#include "proto/auth.h"
#include "proto/dslaunch.grpc.pb.h"
#include "proto/message_limits.h"
#include "proto/rank_certificates.h"
#include "tests/support/run_command.h"

extern char** environ;

namespace v1 = dslaunch::v1;
namespace core = dslaunch::core;
namespace proto = dslaunch::proto;
using dslaunch::controller::CommandSink;
using dslaunch::controller::ControllerHandler;
using dslaunch::controller::ControllerServer;
using dslaunch::controller::ControllerServerOptions;
using namespace std::chrono_literals;

namespace {

// Records every call; register_rank can be made to block until released.
class FakeHandler final : public ControllerHandler {
 public:
  grpc::Status register_rank(const v1::RegisterRequest& request,
                             v1::RegisterReply* reply) override {
    std::unique_lock lock(mutex_);
    ++calls_;
    registrations_.push_back(request);
    changed_.notify_all();
    changed_.wait(lock, [&] { return !block_register_; });
    reply->set_job_id("demo-20250101-000000-beef");
    reply->set_heartbeat_interval_ms(5000);
    reply->mutable_placement()->set_rank(request.rank());
    reply->mutable_placement()->set_world_size(4);
    reply->mutable_placement()->set_host(request.host());
    reply->set_resolved_spec_yaml(register_spec_);
    return grpc::Status::OK;
  }

  void session_opened(int rank, std::shared_ptr<CommandSink> sink) override {
    std::lock_guard lock(mutex_);
    ++calls_;
    opened_.push_back(rank);
    sinks_[rank] = std::move(sink);
    changed_.notify_all();
  }

  void worker_message(const v1::WorkerMessage& message) override {
    std::lock_guard lock(mutex_);
    ++calls_;
    messages_.push_back(message);
    changed_.notify_all();
  }

  void session_closed(int rank) override {
    std::lock_guard lock(mutex_);
    ++calls_;
    closed_.push_back(rank);
    changed_.notify_all();
  }

  grpc::Status get_status(v1::JobStatus* status) override {
    std::lock_guard lock(mutex_);
    ++calls_;
    status->set_job_id("demo-20250101-000000-beef");
    status->set_state("RUNNING");
    status->set_step(120);
    status->set_total_steps(1000);
    status->set_loss(3.25);
    v1::RankStatus* rank = status->add_ranks();
    rank->set_rank(0);
    rank->set_host("node01");
    rank->set_state("running");
    return grpc::Status::OK;
  }

  grpc::Status stop(const v1::StopRequest& request, v1::StopReply* reply) override {
    std::lock_guard lock(mutex_);
    ++calls_;
    stops_.push_back(request);
    reply->set_state(request.now() ? "STOPPED" : "RUNNING");
    return grpc::Status::OK;
  }

  void set_register_spec(std::string spec) {
    std::lock_guard lock(mutex_);
    register_spec_ = std::move(spec);
  }

  void block_register() {
    std::lock_guard lock(mutex_);
    block_register_ = true;
  }
  void release_register() {
    std::lock_guard lock(mutex_);
    block_register_ = false;
    changed_.notify_all();
  }

  // Waits (at most 10 s) until `predicate` holds over the recorded calls.
  template <typename Predicate>
  bool wait_until(Predicate predicate) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 10s, [&] { return predicate(*this); });
  }

  // Snapshots, taken under the lock.
  template <typename F>
  auto locked(F f) const {
    std::lock_guard lock(mutex_);
    return f();
  }

  int calls() const {
    return locked([&] { return calls_; });
  }
  std::vector<int> opened() const {
    return locked([&] { return opened_; });
  }
  std::vector<int> closed() const {
    return locked([&] { return closed_; });
  }
  std::vector<v1::WorkerMessage> messages() const {
    return locked([&] { return messages_; });
  }
  std::vector<v1::RegisterRequest> registrations() const {
    return locked([&] { return registrations_; });
  }
  std::vector<v1::StopRequest> stops() const {
    return locked([&] { return stops_; });
  }
  std::shared_ptr<CommandSink> sink(int rank) const {
    return locked([&]() -> std::shared_ptr<CommandSink> {
      const auto found = sinks_.find(rank);
      return found == sinks_.end() ? nullptr : found->second;
    });
  }

  // For wait_until predicates, which run under the lock.
  size_t opened_count() const { return opened_.size(); }
  size_t closed_count() const { return closed_.size(); }
  size_t message_count() const { return messages_.size(); }
  size_t registration_count() const { return registrations_.size(); }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int calls_ = 0;
  bool block_register_ = false;
  std::string register_spec_;
  std::vector<v1::RegisterRequest> registrations_;
  std::vector<int> opened_;
  std::vector<int> closed_;
  std::vector<v1::WorkerMessage> messages_;
  std::vector<v1::StopRequest> stops_;
  std::map<int, std::shared_ptr<CommandSink>> sinks_;
};

const std::string& job_token() {
  static const std::string token = proto::generate_token().token;
  return token;
}

ControllerServerOptions server_options(const std::string& token) {
  ControllerServerOptions options;
  options.token = token;
  return options;
}

ControllerServerOptions tls_server_options(const std::string& cert_file,
                                           const std::string& key_file,
                                           const std::string& ca_file = "") {
  ControllerServerOptions options = server_options(job_token());
  options.tls.emplace();
  options.tls->cert_file = cert_file;
  options.tls->key_file = key_file;
  options.tls->ca_file = ca_file;
  return options;
}

proto::ClientOptions tls_client_options(const std::string& ca_file,
                                        const std::string& cert_file = "",
                                        const std::string& key_file = "") {
  proto::ClientOptions options;
  options.tls.emplace();
  options.tls->ca_file = ca_file;
  options.tls->cert_file = cert_file;
  options.tls->key_file = key_file;
  return options;
}

// A server on 127.0.0.1 with an OS-chosen port, shut down (after the handler
// is released) when the test ends.
struct Loopback {
  FakeHandler handler;
  ControllerServer server;
  int port = 0;

  explicit Loopback(ControllerServerOptions options = server_options(job_token()))
      : server(handler, std::move(options)) {
    const dslaunch::controller::StartResult started = server.start("127.0.0.1:0");
    REQUIRE(started.error == "");
    REQUIRE(started.port > 0);
    port = started.port;
  }
  ~Loopback() {
    handler.release_register();
    server.shutdown(1s);
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  proto::ControllerClient client(const std::string& token = job_token(),
                                 proto::ClientOptions options = {}) const {
    return proto::ControllerClient(address(), token, std::move(options));
  }

  std::unique_ptr<v1::Controller::Stub> raw_stub() const {
    return v1::Controller::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  }
};

v1::WorkerMessage heartbeat(int rank, int64_t step) {
  v1::WorkerMessage message;
  message.set_rank(rank);
  message.mutable_heartbeat()->set_step(step);
  message.mutable_heartbeat()->set_phase(v1::PHASE_TRAIN);
  return message;
}

// Commands received by a client session, in order.
struct CommandLog {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<v1::ControllerCommand> commands;

  proto::ControllerClient::CommandCallback callback() {
    return [this](const v1::ControllerCommand& command) {
      std::lock_guard lock(mutex);
      commands.push_back(command);
      changed.notify_all();
    };
  }
  bool wait_for(size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return commands.size() >= count; });
  }
};

std::chrono::system_clock::time_point in(std::chrono::milliseconds duration) {
  return std::chrono::system_clock::now() + duration;
}

}  // namespace

TEST_CASE("a rank registers and gets its placement back") {
  Loopback loopback;
  proto::ControllerClient client = loopback.client();
  REQUIRE(client.status().ok());

  v1::RegisterRequest request;
  request.set_rank(2);
  request.set_host("node02");
  request.set_pid(4121);
  request.set_device("cpu");
  v1::RegisterReply reply;
  const core::Status status = client.register_rank(request, &reply);
  REQUIRE(status.ok());
  CHECK(reply.job_id() == "demo-20250101-000000-beef");
  CHECK(reply.heartbeat_interval_ms() == 5000);
  CHECK(reply.placement().rank() == 2);
  CHECK(reply.placement().world_size() == 4);
  CHECK(reply.placement().host() == "node02");

  const std::vector<v1::RegisterRequest> seen = loopback.handler.registrations();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].rank() == 2);
  CHECK(seen[0].pid() == 4121);
  CHECK(seen[0].device() == "cpu");
}

TEST_CASE("get_status returns the handler's view of the job") {
  Loopback loopback;
  proto::ControllerClient client = loopback.client();
  v1::JobStatus status;
  REQUIRE(client.get_status(&status).ok());
  CHECK(status.job_id() == "demo-20250101-000000-beef");
  CHECK(status.state() == "RUNNING");
  CHECK(status.step() == 120);
  CHECK(status.total_steps() == 1000);
  CHECK(status.loss() == 3.25);
  REQUIRE(status.ranks_size() == 1);
  CHECK(status.ranks(0).host() == "node01");
}

TEST_CASE("stop reaches the handler and returns its reply") {
  Loopback loopback;
  proto::ControllerClient client = loopback.client();
  v1::StopRequest request;
  request.set_now(true);
  v1::StopReply reply;
  REQUIRE(client.stop(request, &reply).ok());
  CHECK(reply.state() == "STOPPED");
  const std::vector<v1::StopRequest> stops = loopback.handler.stops();
  REQUIRE(stops.size() == 1);
  CHECK(stops[0].now());
}

TEST_CASE("a session carries heartbeats up and commands down, then closes cleanly") {
  Loopback loopback;
  proto::ControllerClient client = loopback.client();
  CommandLog log;
  std::promise<core::Status> ended;
  std::unique_ptr<proto::Session> session = client.open_session(
      3, log.callback(), [&](const core::Status& status) { ended.set_value(status); });

  // The announcement opens the session before any heartbeat.
  REQUIRE(loopback.handler.wait_until([](const FakeHandler& h) { return h.opened_count() == 1; }));
  CHECK(loopback.handler.opened() == std::vector<int>{3});
  CHECK(loopback.handler.messages().empty());

  for (int64_t step : {10, 20, 30}) {
    v1::WorkerMessage message = heartbeat(99, step);  // the session stamps its own rank
    REQUIRE(session->send(message));
  }
  REQUIRE(loopback.handler.wait_until([](const FakeHandler& h) { return h.message_count() == 3; }));
  const std::vector<v1::WorkerMessage> messages = loopback.handler.messages();
  for (size_t i = 0; i < messages.size(); ++i) {
    CHECK(messages[i].rank() == 3);
    CHECK(messages[i].heartbeat().step() == static_cast<int64_t>(10 * (i + 1)));
    CHECK(messages[i].heartbeat().phase() == v1::PHASE_TRAIN);
  }

  const std::shared_ptr<CommandSink> sink = loopback.handler.sink(3);
  REQUIRE(sink != nullptr);
  v1::ControllerCommand checkpoint;
  checkpoint.set_kind(v1::ControllerCommand::KIND_CHECKPOINT_NOW);
  checkpoint.set_step(30);
  checkpoint.set_directory("checkpoints/step_30");
  v1::ControllerCommand stop;
  stop.set_kind(v1::ControllerCommand::KIND_STOP);
  REQUIRE(sink->send(checkpoint));
  REQUIRE(sink->send(stop));
  REQUIRE(log.wait_for(2));
  {
    std::lock_guard lock(log.mutex);
    REQUIRE(log.commands.size() == 2);
    CHECK(log.commands[0].kind() == v1::ControllerCommand::KIND_CHECKPOINT_NOW);
    CHECK(log.commands[0].step() == 30);
    CHECK(log.commands[0].directory() == "checkpoints/step_30");
    CHECK(log.commands[1].kind() == v1::ControllerCommand::KIND_STOP);
  }

  const core::Status closed = session->close();
  CHECK(closed.code() == core::StatusCode::kOk);
  CHECK(ended.get_future().get().ok());
  CHECK(session->ended());
  CHECK_FALSE(session->send(heartbeat(3, 40)));
  REQUIRE(loopback.handler.wait_until([](const FakeHandler& h) { return h.closed_count() == 1; }));
  CHECK(loopback.handler.closed() == std::vector<int>{3});
  CHECK_FALSE(sink->send(stop));
}

TEST_CASE("a wrong token is refused on every call and the handler sees nothing") {
  Loopback loopback;
  proto::ControllerClient client = loopback.client(proto::generate_token().token);

  v1::RegisterReply register_reply;
  CHECK(client.register_rank(v1::RegisterRequest(), &register_reply).code() ==
        core::StatusCode::kUnauthenticated);
  v1::JobStatus status;
  const core::Status refused = client.get_status(&status);
  CHECK(refused.code() == core::StatusCode::kUnauthenticated);
  CHECK(refused.message() == "wrong job token: this controller runs another job");
  v1::StopReply stop_reply;
  CHECK(client.stop(v1::StopRequest(), &stop_reply).code() == core::StatusCode::kUnauthenticated);

  std::unique_ptr<proto::Session> session = client.open_session(0, {});
  session->send(heartbeat(0, 1));  // may already be refused
  const std::optional<core::Status> ended = session->wait_for_end(10s);
  REQUIRE(ended.has_value());
  CHECK(ended->code() == core::StatusCode::kUnauthenticated);

  CHECK(loopback.handler.calls() == 0);
  CHECK(loopback.server.refused_calls() == 4);
}

TEST_CASE("a missing token, or one without 'Bearer ', is refused and the handler sees nothing") {
  Loopback loopback;
  const std::unique_ptr<v1::Controller::Stub> stub = loopback.raw_stub();

  grpc::ClientContext register_context;
  register_context.set_deadline(in(10s));
  v1::RegisterReply register_reply;
  const grpc::Status refused =
      stub->Register(&register_context, v1::RegisterRequest(), &register_reply);
  CHECK(refused.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(refused.error_message() ==
        "no job token: every call must carry 'authorization: Bearer <token>' (the token is in "
        "the job directory and in the ranks' environment)");

  grpc::ClientContext status_context;
  status_context.set_deadline(in(10s));
  status_context.AddMetadata("authorization", job_token());  // the right token, wrong form
  v1::JobStatus status;
  CHECK(stub->GetStatus(&status_context, v1::GetStatusRequest(), &status).error_code() ==
        grpc::StatusCode::UNAUTHENTICATED);

  grpc::ClientContext stop_context;
  stop_context.set_deadline(in(10s));
  v1::StopReply stop_reply;
  CHECK(stub->Stop(&stop_context, v1::StopRequest(), &stop_reply).error_code() ==
        grpc::StatusCode::UNAUTHENTICATED);

  grpc::ClientContext session_context;
  session_context.set_deadline(in(10s));
  auto stream = stub->Session(&session_context);
  stream->Write(heartbeat(0, 1));
  v1::ControllerCommand command;
  CHECK_FALSE(stream->Read(&command));
  CHECK(stream->Finish().error_code() == grpc::StatusCode::UNAUTHENTICATED);

  CHECK(loopback.handler.calls() == 0);
  CHECK(loopback.server.refused_calls() == 4);
}

TEST_CASE("a 5 MiB spec goes up and comes back: gRPC's 4 MiB default is not the limit") {
  Loopback loopback;
  const std::string spec(5u << 20, 'x');
  loopback.handler.set_register_spec(spec);
  proto::ControllerClient client = loopback.client();
  v1::RegisterRequest request;
  request.set_rank(1);
  request.set_host(spec);
  v1::RegisterReply reply;
  const core::Status status = client.register_rank(request, &reply);
  REQUIRE(status.message() == "");
  CHECK(reply.resolved_spec_yaml() == spec);
  const std::vector<v1::RegisterRequest> seen = loopback.handler.registrations();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].host().size() == spec.size());
}

TEST_CASE("a message above the cap is refused with RESOURCE_EXHAUSTED on both sides") {
  Loopback loopback;
  v1::RegisterRequest request;
  request.set_host(std::string(proto::kMaxMessageBytes, 'x'));
  v1::RegisterReply reply;

  // The client refuses to send it.
  proto::ControllerClient client = loopback.client();
  CHECK(client.register_rank(request, &reply).code() == core::StatusCode::kResourceExhausted);

  // A client without that limit sends it, and the controller refuses it.
  const std::unique_ptr<v1::Controller::Stub> stub = loopback.raw_stub();
  grpc::ClientContext context;
  context.set_deadline(in(30s));
  context.AddMetadata("authorization", proto::bearer_value(job_token()));
  CHECK(stub->Register(&context, request, &reply).error_code() ==
        grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(loopback.handler.calls() == 0);
}

TEST_CASE("a wrong token is refused from the headers, before the body is read") {
  Loopback loopback;
  const std::unique_ptr<v1::Controller::Stub> stub = loopback.raw_stub();
  v1::RegisterRequest request;
  // Over the cap: had the body been read first, RESOURCE_EXHAUSTED would answer.
  request.set_host(std::string(proto::kMaxMessageBytes, 'x'));
  grpc::ClientContext context;
  context.set_deadline(in(30s));
  context.AddMetadata("authorization", proto::bearer_value(proto::generate_token().token));
  v1::RegisterReply reply;
  const grpc::Status refused = stub->Register(&context, request, &reply);
  CHECK(refused.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(refused.error_message() == "wrong job token: this controller runs another job");
  CHECK(loopback.handler.calls() == 0);
  CHECK(loopback.server.refused_calls() == 1);
}

TEST_CASE("a unary call whose handler blocks ends with DEADLINE_EXCEEDED at its deadline") {
  Loopback loopback;
  loopback.handler.block_register();
  proto::ClientOptions options;
  options.deadline = 300ms;
  proto::ControllerClient client = loopback.client(job_token(), options);

  const auto start = std::chrono::steady_clock::now();
  v1::RegisterReply reply;
  const core::Status status = client.register_rank(v1::RegisterRequest(), &reply);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(status.code() == core::StatusCode::kDeadlineExceeded);
  CHECK(elapsed >= 250ms);  // gRPC's timers may fire a little early
  CHECK(elapsed < 5s);
  CHECK(loopback.handler.registrations().size() == 1);
  loopback.handler.release_register();
}

TEST_CASE("a session whose messages switch rank is ended with INVALID_ARGUMENT") {
  Loopback loopback;
  const std::unique_ptr<v1::Controller::Stub> stub = loopback.raw_stub();
  grpc::ClientContext context;
  context.set_deadline(in(10s));
  context.AddMetadata("authorization", proto::bearer_value(job_token()));
  auto stream = stub->Session(&context);
  REQUIRE(stream->Write(heartbeat(1, 100)));
  REQUIRE(loopback.handler.wait_until([](const FakeHandler& h) { return h.message_count() == 1; }));
  stream->Write(heartbeat(2, 101));
  v1::ControllerCommand command;
  CHECK_FALSE(stream->Read(&command));
  const grpc::Status status = stream->Finish();
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message() == "this session belongs to rank 1 but a message claims rank 2");

  REQUIRE(loopback.handler.wait_until([](const FakeHandler& h) { return h.closed_count() == 1; }));
  CHECK(loopback.handler.opened() == std::vector<int>{1});
  CHECK(loopback.handler.closed() == std::vector<int>{1});
  const std::vector<v1::WorkerMessage> messages = loopback.handler.messages();
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].heartbeat().step() == 100);
}

TEST_CASE("a session whose first message names a negative rank is refused unopened") {
  Loopback loopback;
  const std::unique_ptr<v1::Controller::Stub> stub = loopback.raw_stub();
  grpc::ClientContext context;
  context.set_deadline(in(10s));
  context.AddMetadata("authorization", proto::bearer_value(job_token()));
  auto stream = stub->Session(&context);
  stream->Write(heartbeat(-1, 1));
  v1::ControllerCommand command;
  CHECK_FALSE(stream->Read(&command));
  const grpc::Status status = stream->Finish();
  CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(status.error_message() == "a session's first message must name its rank (got -1)");
  CHECK(loopback.handler.calls() == 0);
}

TEST_CASE("shutdown ends every open session, and the handler hears each one close") {
  auto loopback = std::make_unique<Loopback>();
  proto::ControllerClient client = loopback->client();
  std::vector<std::unique_ptr<proto::Session>> sessions;
  std::vector<std::promise<core::Status>> ends(3);
  for (int rank = 0; rank < 3; ++rank) {
    sessions.push_back(client.open_session(
        rank, {}, [&ends, rank](const core::Status& status) { ends[rank].set_value(status); }));
  }
  REQUIRE(loopback->handler.wait_until([](const FakeHandler& h) { return h.opened_count() == 3; }));
  CHECK(loopback->server.open_sessions() == 3);

  const auto start = std::chrono::steady_clock::now();
  loopback->server.shutdown(2s);
  // Returning means every session_closed already ran.
  CHECK(loopback->handler.closed_count() == 3);
  CHECK(loopback->server.open_sessions() == 0);
  for (int rank = 0; rank < 3; ++rank) {
    std::future<core::Status> end = ends[rank].get_future();
    REQUIRE(end.wait_for(5s) == std::future_status::ready);
    const core::Status status = end.get();
    CHECK(status.code() == core::StatusCode::kUnavailable);
    CHECK(status.message() == "the controller is shutting down");
  }
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK_FALSE(sessions[0]->send(heartbeat(0, 1)));
  loopback.reset();
}

TEST_CASE("a session notices within seconds that the controller process was killed") {
  // The controller runs in a process of its own, so SIGKILL takes it away
  // without any goodbye on the wire.
  int out[2];
  REQUIRE(pipe(out) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const std::string program = dslaunch::testing::runfile("tests/proto/controller_server_process");
  std::string token = job_token();
  char* argv[] = {const_cast<char*>(program.c_str()), token.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  FILE* from_child = fdopen(out[0], "r");
  int port = 0;
  const bool got_port = fscanf(from_child, "%d", &port) == 1;
  fclose(from_child);
  if (!got_port) kill(pid, SIGKILL);
  REQUIRE(got_port);

  proto::ControllerClient client("127.0.0.1:" + std::to_string(port), token);
  CommandLog log;
  std::promise<core::Status> ended;
  std::unique_ptr<proto::Session> session = client.open_session(
      5, log.callback(), [&](const core::Status& status) { ended.set_value(status); });
  // The helper answers the announcement with DUMP_STACKS: the session is live.
  const bool live = log.wait_for(1);
  kill(pid, SIGKILL);
  int wait_status = 0;
  waitpid(pid, &wait_status, 0);
  REQUIRE(live);

  const auto killed = std::chrono::steady_clock::now();
  std::future<core::Status> end = ended.get_future();
  REQUIRE(end.wait_for(10s) == std::future_status::ready);
  CHECK(std::chrono::steady_clock::now() - killed < 5s);
  CHECK(end.get().code() == core::StatusCode::kUnavailable);
  CHECK(session->wait_for_end(5s).has_value());
}

TEST_CASE("many sessions at once each deliver every message, in order, under their own rank") {
  Loopback loopback;
  constexpr int kRanks = 64;
  constexpr int kBeats = 20;
  proto::ControllerClient client = loopback.client();
  std::vector<std::unique_ptr<proto::Session>> sessions;
  for (int rank = 0; rank < kRanks; ++rank) sessions.push_back(client.open_session(rank, {}));
  for (int step = 1; step <= kBeats; ++step) {
    for (auto& session : sessions) REQUIRE(session->send(heartbeat(0, step)));
  }
  REQUIRE(loopback.handler.wait_until(
      [](const FakeHandler& h) { return h.message_count() == size_t{kRanks} * kBeats; }));
  std::vector<int64_t> last_step(kRanks, 0);
  for (const v1::WorkerMessage& message : loopback.handler.messages()) {
    REQUIRE(message.rank() >= 0);
    REQUIRE(message.rank() < kRanks);
    CHECK(message.heartbeat().step() == last_step[message.rank()] + 1);
    last_step[message.rank()] = message.heartbeat().step();
  }
  for (auto& session : sessions) CHECK(session->close().ok());
  REQUIRE(loopback.handler.wait_until(
      [](const FakeHandler& h) { return h.closed_count() == size_t{kRanks}; }));
}

TEST_CASE("the server will not start without a token or on a port that is taken") {
  FakeHandler handler;
  ControllerServer no_token(handler, server_options(""));
  const dslaunch::controller::StartResult refused = no_token.start("127.0.0.1:0");
  CHECK(refused.port == 0);
  CHECK(refused.error == "the controller needs a job token to authenticate its calls");

  Loopback loopback;
  ControllerServer second(handler, server_options(job_token()));
  const dslaunch::controller::StartResult taken = second.start(loopback.address());
  CHECK(taken.port == 0);
  CHECK(taken.error == "cannot listen on " + loopback.address() +
                           ": the port is in use, or the host is not an address of this machine");
}

namespace {

std::string testdata(const std::string& name) {
  return dslaunch::testing::runfile("tests/proto/testdata/" + name);
}

}  // namespace

TEST_CASE("over TLS a client that trusts the controller's CA is served, a plaintext one is not") {
  Loopback loopback(tls_server_options(testdata("server.pem"), testdata("server.key")));
  proto::ClientOptions options = tls_client_options(testdata("ca.pem"));
  proto::ControllerClient client = loopback.client(job_token(), options);
  REQUIRE(client.status().ok());
  v1::JobStatus status;
  const core::Status served = client.get_status(&status);
  CHECK(served.message() == "");
  CHECK(status.state() == "RUNNING");

  proto::ClientOptions short_deadline;
  short_deadline.deadline = 2s;
  proto::ControllerClient plaintext = loopback.client(job_token(), short_deadline);
  CHECK(plaintext.get_status(&status).code() == core::StatusCode::kUnavailable);
}

TEST_CASE("a controller that asks for client certificates serves only clients that have one") {
  Loopback loopback(
      tls_server_options(testdata("server.pem"), testdata("server.key"), testdata("ca.pem")));
  proto::ClientOptions with_cert =
      tls_client_options(testdata("ca.pem"), testdata("client.pem"), testdata("client.key"));
  v1::JobStatus status;
  CHECK(loopback.client(job_token(), with_cert).get_status(&status).ok());

  proto::ClientOptions without_cert = tls_client_options(testdata("ca.pem"));
  without_cert.deadline = 2s;
  CHECK_FALSE(loopback.client(job_token(), without_cert).get_status(&status).ok());
  CHECK(loopback.handler.calls() == 1);
}

TEST_CASE("a client whose CA file cannot be read says so on every call") {
  proto::ClientOptions options = tls_client_options("/nonexistent/ca.pem");
  proto::ControllerClient client("127.0.0.1:1", job_token(), options);
  CHECK(client.status().code() == core::StatusCode::kFailedPrecondition);
  CHECK(client.status().message() ==
        "tls.ca: /nonexistent/ca.pem: cannot read: No such file or directory");
  v1::JobStatus status;
  CHECK(client.get_status(&status).message() == client.status().message());
  bool ended = false;
  std::unique_ptr<proto::Session> session =
      client.open_session(0, {}, [&](const core::Status&) { ended = true; });
  CHECK(ended);
  CHECK(session->ended());
  CHECK_FALSE(session->send(heartbeat(0, 1)));
}

TEST_CASE("a server whose key file cannot be read will not start and names the file") {
  FakeHandler handler;
  ControllerServer server(handler,
                          tls_server_options(testdata("server.pem"), "/nonexistent/server.key"));
  const dslaunch::controller::StartResult started = server.start("127.0.0.1:0");
  CHECK(started.port == 0);
  CHECK(started.error == "tls: /nonexistent/server.key: cannot read: No such file or directory");
}

namespace {

constexpr const char* kJobId = "mtls-20260101-000000-beef";

// A server whose ranks prove their rank with certificates its job issues,
// for attempt 1.
ControllerServerOptions rank_certificate_options(
    std::shared_ptr<const proto::JobCertificateAuthority> authority) {
  ControllerServerOptions options =
      tls_server_options(testdata("server.pem"), testdata("server.key"));
  options.rank_certificates = std::move(authority);
  options.attempt = 1;
  options.world_size = 4;
  return options;
}

std::shared_ptr<const proto::JobCertificateAuthority> job_authority() {
  core::StatusOr<std::unique_ptr<proto::JobCertificateAuthority>> made =
      proto::JobCertificateAuthority::create(kJobId);
  REQUIRE(made.ok());
  return std::move(*made);
}

// Client options carrying the certificate issued for `rank` (of `attempt`),
// asked for as a rank does.
proto::ClientOptions certified_as(const Loopback& loopback, int rank, int attempt = 1) {
  core::StatusOr<proto::KeyAndRequest> made = proto::make_key_and_request("test rank");
  REQUIRE(made.ok());
  v1::CertificateRequest request;
  request.set_rank(rank);
  request.set_restart_count(attempt);
  request.set_request_pem(made->request_pem);
  v1::CertificateReply reply;
  const core::Status issued = loopback.client(job_token(), tls_client_options(testdata("ca.pem")))
                                  .issue_certificate(request, &reply);
  INFO(issued.message());
  REQUIRE(issued.ok());
  proto::ClientOptions options = tls_client_options(testdata("ca.pem"));
  options.tls->cert_pem = reply.certificate_pem();
  options.tls->key_pem = made->private_key_pem;
  options.deadline = 5s;
  return options;
}

v1::RegisterRequest registration(int rank) {
  v1::RegisterRequest request;
  request.set_rank(rank);
  request.set_restart_count(1);
  return request;
}

}  // namespace

TEST_CASE("with job-issued certificates a rank registers as its own rank only") {
  Loopback loopback(rank_certificate_options(job_authority()));
  const proto::ClientOptions rank2 = certified_as(loopback, 2);
  v1::RegisterReply reply;
  CHECK(loopback.client(job_token(), rank2).register_rank(registration(2), &reply).ok());

  const core::Status as_other =
      loopback.client(job_token(), rank2).register_rank(registration(3), &reply);
  CHECK(as_other.code() == core::StatusCode::kUnauthenticated);  // PERMISSION_DENIED
  CHECK(as_other.message() ==
        std::string("the client certificate names rank 2 of attempt 1 of job ") + kJobId +
            "; it cannot act as rank 3 of attempt 1 of job " + kJobId);

  // Without a certificate: server TLS only, the token alone is not enough.
  const core::Status without = loopback.client(job_token(), tls_client_options(testdata("ca.pem")))
                                   .register_rank(registration(2), &reply);
  CHECK(without.code() == core::StatusCode::kUnauthenticated);
  CHECK(without.message() ==
        "this job's ranks must present the client certificate the controller issued them "
        "(IssueCertificate)");

  // A certificate from another CA (or another job's) fails the handshake.
  proto::ClientOptions foreign =
      tls_client_options(testdata("ca.pem"), testdata("client.pem"), testdata("client.key"));
  foreign.deadline = 3s;
  CHECK(loopback.client(job_token(), foreign).register_rank(registration(2), &reply).code() ==
        core::StatusCode::kUnavailable);
  // Plaintext is refused at the transport.
  proto::ClientOptions plaintext;
  plaintext.deadline = 3s;
  CHECK(loopback.client(job_token(), plaintext).register_rank(registration(2), &reply).code() ==
        core::StatusCode::kUnavailable);
  CHECK(loopback.handler.registrations().size() == 1);
}

TEST_CASE("with job-issued certificates a session can speak only for its certificate's rank") {
  Loopback loopback(rank_certificate_options(job_authority()));
  const proto::ClientOptions rank1 = certified_as(loopback, 1);
  proto::ControllerClient client = loopback.client(job_token(), rank1);
  std::unique_ptr<proto::Session> own = client.open_session(1, {});
  REQUIRE(loopback.handler.wait_until([](const FakeHandler& h) { return h.opened_count() == 1; }));
  CHECK(loopback.handler.opened() == std::vector<int>{1});

  std::unique_ptr<proto::Session> other = client.open_session(0, {});
  const std::optional<core::Status> ended = other->wait_for_end(10s);
  REQUIRE(ended);
  CHECK(ended->code() == core::StatusCode::kUnauthenticated);
  CHECK_THAT(ended->message(),
             Catch::StartsWith("the client certificate names rank 1 of attempt 1"));
  CHECK(loopback.handler.opened() == std::vector<int>{1});
  CHECK(own->close().ok());
}

TEST_CASE("a rank gets one certificate per attempt, for that attempt, from a valid request") {
  Loopback loopback(rank_certificate_options(job_authority()));
  proto::ControllerClient client =
      loopback.client(job_token(), tls_client_options(testdata("ca.pem")));
  core::StatusOr<proto::KeyAndRequest> made = proto::make_key_and_request("rank");
  REQUIRE(made.ok());
  v1::CertificateRequest request;
  request.set_rank(0);
  request.set_restart_count(1);
  request.set_request_pem(made->request_pem);
  v1::CertificateReply reply;
  REQUIRE(client.issue_certificate(request, &reply).ok());
  const std::optional<proto::RankIdentity> identity =
      proto::identity_in_certificate(reply.certificate_pem());
  REQUIRE(identity);
  CHECK(*identity == proto::RankIdentity{kJobId, 1, 0});

  const core::Status again = client.issue_certificate(request, &reply);
  CHECK(again.code() == core::StatusCode::kFailedPrecondition);
  CHECK(again.message() == "rank 0 already has its certificate for attempt 1");

  request.set_rank(1);
  request.set_restart_count(0);
  const core::Status stale = client.issue_certificate(request, &reply);
  CHECK(stale.code() == core::StatusCode::kFailedPrecondition);
  CHECK(stale.message() == "the request is for attempt 0, but this is attempt 1");

  request.set_restart_count(1);
  request.set_rank(4);
  const core::Status outside = client.issue_certificate(request, &reply);
  CHECK(outside.code() == core::StatusCode::kInvalidArgument);
  CHECK(outside.message() == "no rank 4 in this job of 4 ranks");
  request.set_rank(1);
  request.set_request_pem("not a request");
  CHECK(client.issue_certificate(request, &reply).code() == core::StatusCode::kInvalidArgument);
  request.set_request_pem(made->request_pem);  // a failed request does not use up the rank
  CHECK(client.issue_certificate(request, &reply).ok());

  // Without the token nothing is issued.
  proto::ControllerClient no_token =
      loopback.client("wrong-token", tls_client_options(testdata("ca.pem")));
  request.set_rank(3);
  CHECK(no_token.issue_certificate(request, &reply).code() == core::StatusCode::kUnauthenticated);
}
