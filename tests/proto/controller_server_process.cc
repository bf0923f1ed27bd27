// A controller in a process of its own, for tests that take it away with
// SIGKILL: serves on 127.0.0.1 with an OS-chosen port, prints the port on
// stdout, answers every session's announcement with DUMP_STACKS, and runs
// until killed.
//
//   controller_server_process TOKEN
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "launcher/controller/controller_handler.h"
#include "launcher/controller/controller_server.h"

namespace v1 = dslaunch::v1;

namespace {

class AnnouncingHandler final : public dslaunch::controller::ControllerHandler {
 public:
  grpc::Status register_rank(const v1::RegisterRequest&, v1::RegisterReply*) override {
    return grpc::Status::OK;
  }
  void session_opened(int, std::shared_ptr<dslaunch::controller::CommandSink> sink) override {
    v1::ControllerCommand command;
    command.set_kind(v1::ControllerCommand::KIND_DUMP_STACKS);
    sink->send(command);
  }
  void worker_message(const v1::WorkerMessage&) override {}
  void session_closed(int) override {}
  grpc::Status get_status(v1::JobStatus*) override { return grpc::Status::OK; }
  grpc::Status stop(const v1::StopRequest&, v1::StopReply*) override { return grpc::Status::OK; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: controller_server_process TOKEN\n");
    return 2;
  }
  AnnouncingHandler handler;
  dslaunch::controller::ControllerServerOptions options;
  options.token = argv[1];
  dslaunch::controller::ControllerServer server(handler, options);
  const dslaunch::controller::StartResult started = server.start("127.0.0.1:0");
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.error.c_str());
    return 1;
  }
  std::printf("%d\n", started.port);
  std::fflush(stdout);
  for (;;) pause();
}
