// The generated protocol code, used over a real loopback gRPC connection.
#include <chrono>
#include <memory>
#include <string>

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <catch2/catch.hpp>

#include "proto/dslaunch.grpc.pb.h"
#include "proto/dslaunch.pb.h"

namespace v1 = dslaunch::v1;

namespace {

// Answers Register with a placement derived from the request, and ends each
// session with STOP after the third heartbeat.
class EchoController final : public v1::Controller::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                        v1::RegisterReply* reply) override {
    reply->set_job_id("job-" + request->host());
    reply->set_heartbeat_interval_ms(1000);
    reply->mutable_placement()->set_rank(request->rank());
    reply->mutable_placement()->set_world_size(8);
    return grpc::Status::OK;
  }

  grpc::Status Session(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::ControllerCommand, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage message;
    int heartbeats = 0;
    while (stream->Read(&message)) {
      if (message.has_heartbeat() && ++heartbeats == 3) {
        v1::ControllerCommand stop;
        stop.set_kind(v1::ControllerCommand::KIND_STOP);
        stop.set_step(message.heartbeat().step());
        stream->Write(stop);
      }
    }
    return grpc::Status::OK;
  }
};

struct LoopbackServer {
  EchoController service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  LoopbackServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~LoopbackServer() { server->Shutdown(); }

  std::unique_ptr<v1::Controller::Stub> stub() const {
    return v1::Controller::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                       grpc::InsecureChannelCredentials()));
  }
};

std::chrono::system_clock::time_point in_seconds(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

}  // namespace

TEST_CASE("a worker message survives serialization") {
  v1::WorkerMessage message;
  message.set_rank(3);
  v1::Heartbeat* heartbeat = message.mutable_heartbeat();
  heartbeat->set_step(120);
  heartbeat->set_loss(2.75);
  heartbeat->set_phase(v1::PHASE_CHECKPOINT);
  heartbeat->mutable_memory()->set_optimizer_states(int64_t{3} << 33);

  v1::WorkerMessage parsed;
  REQUIRE(parsed.ParseFromString(message.SerializeAsString()));
  CHECK(google::protobuf::util::MessageDifferencer::Equals(message, parsed));
  CHECK(parsed.heartbeat().memory().optimizer_states() == int64_t{3} << 33);
  CHECK(parsed.payload_case() == v1::WorkerMessage::kHeartbeat);
}

TEST_CASE("Register round-trips over loopback gRPC with a deadline") {
  LoopbackServer server;
  REQUIRE(server.server != nullptr);
  REQUIRE(server.port > 0);

  grpc::ClientContext context;
  context.set_deadline(in_seconds(10));
  v1::RegisterRequest request;
  request.set_rank(5);
  request.set_host("node07");
  v1::RegisterReply reply;
  const grpc::Status status = server.stub()->Register(&context, request, &reply);
  REQUIRE(status.ok());
  CHECK(reply.job_id() == "job-node07");
  CHECK(reply.placement().rank() == 5);
  CHECK(reply.placement().world_size() == 8);
  CHECK(reply.heartbeat_interval_ms() == 1000);
}

TEST_CASE("a Session stream carries heartbeats up and a command down") {
  LoopbackServer server;
  grpc::ClientContext context;
  context.set_deadline(in_seconds(10));
  auto stream = server.stub()->Session(&context);
  for (int step = 1; step <= 3; ++step) {
    v1::WorkerMessage message;
    message.set_rank(0);
    message.mutable_heartbeat()->set_step(step * 10);
    REQUIRE(stream->Write(message));
  }
  v1::ControllerCommand command;
  REQUIRE(stream->Read(&command));
  CHECK(command.kind() == v1::ControllerCommand::KIND_STOP);
  CHECK(command.step() == 30);
  stream->WritesDone();
  CHECK(stream->Finish().ok());
}
