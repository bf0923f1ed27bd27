#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "launcher/controller/controller_handler.h"
#include "launcher/controller/token_credentials.h"
#include "proto/rank_certificates.h"

// The Controller gRPC service in front of a ControllerHandler, and the server
// that runs it. The service uses gRPC's callback API: an open session costs a
// small object, not a thread, so thousands of ranks are watched by a few
// threads.
namespace dslaunch::controller {

// Server ping policy, compatible with proto::ClientOptions' keepalive: a
// client may ping this often while idle (half its keepalive period), so a
// healthy rank is never disconnected for its keepalive; a client that pings
// faster is sent away after kMaxPingStrikes such pings. The server pings idle
// clients on the same schedule, so a rank host that vanished is noticed too.
inline constexpr std::chrono::milliseconds kMinClientPingInterval{5'000};
inline constexpr int kMaxPingStrikes = 2;

// Bounds on what clients can hold, sized for a 4096-rank job. A rank's
// connection carries its session and a unary call now and then; a process
// simulating many ranks over one connection (controller_load_bench
// --connections 1, the tests) needs one stream per rank, so twice 4096.
inline constexpr int kMaxStreamsPerConnection = 8192;
// A connection with no call for this long is closed (a rank's never is: its
// session stays open); a client reconnects on its next call.
inline constexpr std::chrono::milliseconds kMaxConnectionIdle{60'000};
// The memory gRPC may use for all connections and calls together (read
// buffers, messages being received): a few times what 4096 ranks need.
inline constexpr size_t kMemoryQuotaBytes = size_t{1} << 30;

// TLS for multi-host jobs (the spec's `tls: {cert, key, ca}`), in PEM files.
struct ServerTls {
  std::string cert_file;  // the controller's certificate chain (required)
  std::string key_file;   // its private key (required)
  // When set, clients must also present a certificate signed by this CA.
  std::string ca_file;
};

struct ControllerServerOptions {
  std::string token;             // the job token every call must carry (required)
  std::optional<ServerTls> tls;  // none: plaintext (loopback, single-host jobs)
  // Commands a session queues while its rank reads slowly; more are refused.
  size_t max_queued_commands = 1024;
  // Mutual TLS with certificates the job issues (with `tls`, whose ca_file
  // then stays empty): IssueCertificate gives each rank of `attempt` one
  // naming it, once, and Register and Session need it, for that rank.
  std::shared_ptr<const proto::JobCertificateAuthority> rank_certificates;
  int attempt = 0;
  int world_size = 0;  // ranks that may ask for a certificate: [0, world_size)
};

struct StartResult {
  int port = 0;       // the bound port when ok()
  std::string error;  // what went wrong, naming the address or file
  bool ok() const { return error.empty(); }
};

class ControllerService;

// Runs the Controller service for one job.
//
// Every call must carry options.token as "authorization: Bearer <token>";
// others are answered UNAUTHENTICATED from their headers, before their
// message is read, and never reach the handler. Messages up to
// proto::kMaxMessageBytes are accepted and sent; a larger one ends its call
// with RESOURCE_EXHAUSTED. A
// Session's first message fixes its rank; a later message naming another
// rank ends the stream with INVALID_ARGUMENT. A message with no payload only
// announces the rank.
//
// Thread-safety: start() and shutdown() are for the owning thread;
// open_sessions() and refused_calls() may be called from any thread.
class ControllerServer {
 public:
  // `handler` must outlive the server (until shutdown() returned).
  ControllerServer(ControllerHandler& handler, ControllerServerOptions options);
  ~ControllerServer();  // shutdown() with no grace period
  ControllerServer(const ControllerServer&) = delete;
  ControllerServer& operator=(const ControllerServer&) = delete;

  // Listens on `address` ("host:port"; port 0 lets the OS choose) and starts
  // serving. Returns the bound port, or an error (no token, a TLS file that
  // cannot be read, an address that cannot be bound). Call once.
  StartResult start(const std::string& address);

  // Refuses new calls, ends every open session with UNAVAILABLE ("the
  // controller is shutting down"), waits up to `grace` for calls in progress,
  // then cancels the rest. Blocks until every handler call has returned and
  // session_closed ran for every opened session. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  size_t open_sessions() const;
  // Calls refused for a missing or wrong token since start().
  int64_t refused_calls() const;

 private:
  std::unique_ptr<ControllerService> service_;
  std::shared_ptr<RefusalCount> refused_;
  std::unique_ptr<grpc::Server> server_;
  bool shut_down_ = false;
};

}  // namespace dslaunch::controller
