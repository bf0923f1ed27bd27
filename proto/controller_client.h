#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "core/status.h"
#include "proto/dslaunch.grpc.pb.h"
#include "proto/dslaunch.pb.h"

// The typed client of the Controller service, used by dsworker and by the
// CLI (`dslaunch status`, `stop`). Every call carries the job token; every
// unary call has a deadline; one Session per rank carries heartbeats and
// events up and commands down. Failures come back as core::Status,
// translated from gRPC's in one place (proto/grpc_status.h).
namespace dslaunch::proto {

namespace v1 = dslaunch::v1;

// Keepalive, declared once. The client pings an idle connection every
// kKeepaliveTime and drops it when the answer takes longer than
// kKeepaliveTimeout, so a controller that vanished without closing its
// sockets (host down, network cut) ends the session within about 15 s. The
// server (launcher/controller/controller_server.h) accepts pings this often.
inline constexpr std::chrono::milliseconds kKeepaliveTime{10'000};
inline constexpr std::chrono::milliseconds kKeepaliveTimeout{5'000};

// TLS towards a controller started with `tls: {cert, key, ca}`.
struct ClientTls {
  std::string ca_file;    // PEM roots that signed the controller's certificate (required)
  std::string cert_file;  // this client's certificate, when the controller asks for one
  std::string key_file;   // its private key
  // The name the certificate must carry, when it differs from the address's host.
  std::string server_name;
  // The client's certificate and key themselves, instead of cert_file and
  // key_file (a rank's certificate issued by the job: never on disk).
  std::string cert_pem;
  std::string key_pem;
};

struct ClientOptions {
  std::chrono::milliseconds deadline{10'000};  // of every unary call
  std::optional<ClientTls> tls;                // none: plaintext (single-host jobs)
  std::chrono::milliseconds keepalive_time = kKeepaliveTime;
  std::chrono::milliseconds keepalive_timeout = kKeepaliveTimeout;
  // Messages a session queues while the connection is slow; send() refuses more.
  size_t max_queued_messages = 1024;
  // A TCP connection of this client's own, not shared with other clients in the
  // process that talk to the same address (benchmarks and tests simulating
  // many workers in one process; a dsworker has one client anyway).
  bool private_connection = false;
};

namespace detail {
class SessionReactor;
}

// One rank's open Session stream.
//
// Thread-safety: send(), ended() and wait_for_end() may be called from any
// thread. The callbacks run on gRPC's threads, one at a time per session,
// and must return promptly; they may call send() but must not call close()
// or destroy the Session (that waits for them and would deadlock), nor
// destroy the last ControllerClient or Session of a channel.
class Session {
 public:
  ~Session();  // close() with its default timeout
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Queues `message` with its rank set to this session's rank and returns at
  // once; a writer drains the queue one message at a time. Returns false,
  // dropping the message, once the session is closing or ended, or when
  // ClientOptions::max_queued_messages are already waiting.
  bool send(v1::WorkerMessage message);

  // Ends the stream cleanly: writes what is queued, tells the controller no
  // more messages come, and waits for its final status. After `timeout` the
  // call is cancelled instead. Blocks; returns the final status (ok for a
  // clean end). Safe to call more than once.
  core::Status close(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // The final status once the stream ended (closed here, ended by the
  // controller, or the connection lost), else nullopt after waiting `timeout`.
  std::optional<core::Status> wait_for_end(std::chrono::milliseconds timeout);
  bool ended() const;

  int rank() const;

 private:
  friend class ControllerClient;
  Session(std::shared_ptr<grpc::Channel> channel, std::unique_ptr<detail::SessionReactor> reactor);
  // Both released here, on the owner's thread, after the call ended, the
  // reactor first (see the .cc); never on one of gRPC's threads.
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<detail::SessionReactor> reactor_;
};

// A client of one controller. Thread-safe: unary calls and open_session may
// run concurrently from any threads. Sessions keep the connection alive, so
// they may outlive the client.
class ControllerClient {
 public:
  // Called for each command the controller sends down a session.
  using CommandCallback = std::function<void(const v1::ControllerCommand&)>;
  // Called once when a session ends, with its final status: ok after a clean
  // close(), kUnavailable when the controller went away or shut down,
  // kUnauthenticated for a wrong token, kInvalidArgument for a bad stream.
  using EndCallback = std::function<void(const core::Status&)>;

  // `address` is "host:port". Does not connect yet. If a TLS file cannot be
  // read, status() says why and every call returns that status.
  ControllerClient(std::string address, std::string token, ClientOptions options = {});

  const core::Status& status() const { return status_; }
  const std::string& address() const { return address_; }

  // Unary calls. Each blocks for at most options.deadline and returns the
  // controller's status (kDeadlineExceeded when it did not answer in time,
  // kUnavailable when it cannot be reached, kUnauthenticated for a wrong token).
  core::Status register_rank(const v1::RegisterRequest& request, v1::RegisterReply* reply);
  core::Status get_status(v1::JobStatus* status);
  core::Status stop(const v1::StopRequest& request, v1::StopReply* reply);
  core::Status checkpoint(v1::CheckpointReply* reply);
  core::Status issue_certificate(const v1::CertificateRequest& request,
                                 v1::CertificateReply* reply);

  // Opens rank `rank`'s session and announces the rank at once (a first
  // message with no payload), so commands can come down before the first
  // heartbeat. Does not block. The session has no deadline; it ends when
  // closed, when the controller ends it, or when the connection is lost
  // (keepalive notices a silent one). When the client is unusable (see
  // status()) the session comes back already ended and on_end has run.
  std::unique_ptr<Session> open_session(int rank, CommandCallback on_command,
                                        EndCallback on_end = {});

 private:
  void prepare(grpc::ClientContext& context, bool with_deadline) const;

  std::string address_;
  std::string token_;
  ClientOptions options_;
  core::Status status_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Controller::Stub> stub_;
};

}  // namespace dslaunch::proto
