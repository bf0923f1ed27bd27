#pragma once

#include <memory>

#include <grpcpp/support/status.h>

#include "proto/dslaunch.pb.h"

// What the Controller service asks of the controller. The service adapter
// (controller_server.h) authenticates every call and checks every session
// stream before anything reaches a handler; a handler only sees calls that
// carry the job token.
namespace dslaunch::controller {

// The way down one rank's session. Held by the handler for as long as it
// likes; it stays safe to use after the session ended.
class CommandSink {
 public:
  virtual ~CommandSink() = default;
  // Queues `command` for the rank and returns without waiting for the wire.
  // Thread-safe. Returns false, dropping the command, once the session is
  // closing or closed (or when its queue is full).
  virtual bool send(const v1::ControllerCommand& command) = 0;
};

// Implemented by the controller. Every method may be called from several of
// gRPC's threads at once and must be thread-safe. The methods run on gRPC's
// callback threads, so they must return promptly (update state, queue work):
// a method that blocks holds up other calls.
//
// Order per session: session_opened, then worker_message for each message
// that carries a payload (one at a time, in the order sent), then
// session_closed, always, once session_opened was called. Sessions of
// different ranks are independent; a rank may open a new session (a new
// attempt, a reconnect) and the handler decides what that means.
class ControllerHandler {
 public:
  virtual ~ControllerHandler() = default;

  // A rank announces itself. The status returned goes to the rank as is
  // (e.g. INVALID_ARGUMENT for a rank outside the world, FAILED_PRECONDITION
  // for one that registered twice); `reply` is sent only with OK.
  virtual grpc::Status register_rank(const v1::RegisterRequest& request,
                                     v1::RegisterReply* reply) = 0;

  // `rank`'s session opened (its first message arrived). `sink` sends
  // commands down it.
  virtual void session_opened(int rank, std::shared_ptr<CommandSink> sink) = 0;

  // A heartbeat or event, with message.rank() equal to the session's rank.
  virtual void worker_message(const v1::WorkerMessage& message) = 0;

  // The session ended: the rank closed it, the connection was lost, the
  // stream was refused or the server shut down. Its sink now refuses commands.
  virtual void session_closed(int rank) = 0;

  // For `dslaunch status`.
  virtual grpc::Status get_status(v1::JobStatus* status) = 0;

  // For `dslaunch stop`: request->now() kills at once, otherwise checkpoint
  // then exit.
  virtual grpc::Status stop(const v1::StopRequest& request, v1::StopReply* reply) = 0;

  // For `dslaunch checkpoint`. Handlers without checkpoints need not
  // implement it.
  virtual grpc::Status checkpoint(const v1::CheckpointRequest&, v1::CheckpointReply*) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this job takes no checkpoints");
  }
};

}  // namespace dslaunch::controller
