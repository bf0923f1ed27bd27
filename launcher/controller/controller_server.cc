#include "launcher/controller/controller_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <grpc/grpc_security_constants.h>

#include "launcher/controller/token_credentials.h"
#include "proto/auth.h"
#include "proto/controller_client.h"
#include "proto/dslaunch.grpc.pb.h"
#include "proto/message_limits.h"

namespace dslaunch::controller {

static_assert(kMinClientPingInterval <= proto::kKeepaliveTime,
              "the server must accept the client's keepalive pings");

namespace {

using SessionBase = grpc::ServerBidiReactor<v1::WorkerMessage, v1::ControllerCommand>;

// The write side and the end of one session, shared between its reactor and
// the handler's sink (which may outlive the reactor). Only one thread starts
// each reactor operation: whoever sets write_in_flight_ under the mutex owns
// the next StartWrite, and whoever sets finished_ owns the one Finish.
// Finish waits for the write in flight, so the reactor (deleted in OnDone,
// which follows Finish) is alive whenever this object touches it.
class SessionCore final : public CommandSink {
 public:
  SessionCore(SessionBase* reactor, size_t max_queued)
      : reactor_(reactor), max_queued_(max_queued) {}

  bool send(const v1::ControllerCommand& command) override {
    const v1::ControllerCommand* next = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (finish_requested_ || write_failed_ || queue_.size() >= max_queued_) return false;
      queue_.push_back(command);
      if (write_in_flight_) return true;
      write_in_flight_ = true;
      next = &queue_.front();  // deque: pushes at the back keep this reference valid
    }
    reactor_->StartWrite(next);
    return true;
  }

  void on_write_done(bool ok) {
    const v1::ControllerCommand* next = nullptr;
    std::optional<grpc::Status> finish;
    {
      std::lock_guard lock(mutex_);
      queue_.pop_front();
      if (!ok) {
        write_failed_ = true;
        queue_.clear();
      }
      if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        write_in_flight_ = false;
        finish = take_finish_locked();
      }
    }
    if (next != nullptr) reactor_->StartWrite(next);
    if (finish) reactor_->Finish(std::move(*finish));
  }

  // Ends the stream with `status` once the queued commands are written (the
  // first status asked for wins). Thread-safe; later calls do nothing.
  void finish(grpc::Status status) {
    std::optional<grpc::Status> finish;
    {
      std::lock_guard lock(mutex_);
      if (finish_requested_) return;
      finish_requested_ = true;
      status_ = std::move(status);
      finish = take_finish_locked();
    }
    if (finish) reactor_->Finish(std::move(*finish));
  }

 private:
  std::optional<grpc::Status> take_finish_locked() {
    if (!finish_requested_ || write_in_flight_ || finished_) return std::nullopt;
    finished_ = true;
    return status_;
  }

  SessionBase* const reactor_;
  const size_t max_queued_;
  std::mutex mutex_;
  std::deque<v1::ControllerCommand> queue_;  // front() is on the wire while write_in_flight_
  bool write_in_flight_ = false;
  bool write_failed_ = false;
  bool finish_requested_ = false;
  bool finished_ = false;
  grpc::Status status_;
};

}  // namespace

// The service adapter: checks streams and turns gRPC's callbacks into
// ControllerHandler calls. Calls reach it only with the job's token: the
// server's credentials (token_credentials.h) refuse the others first.
class ControllerService final : public v1::Controller::CallbackService {
 public:
  ControllerService(ControllerHandler& handler, ControllerServerOptions options)
      : handler_(handler), options_(std::move(options)) {}

  ControllerHandler& handler() { return handler_; }
  const ControllerServerOptions& options() const { return options_; }
  size_t max_queued_commands() const { return options_.max_queued_commands; }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    grpc::Status allowed = rank_allowed(peer_identity(*context), request->rank());
    reactor->Finish(allowed.ok() ? handler_.register_rank(*request, reply) : allowed);
    return reactor;
  }

  grpc::ServerUnaryReactor* IssueCertificate(grpc::CallbackServerContext* context,
                                             const v1::CertificateRequest* request,
                                             v1::CertificateReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(issue_certificate(*request, reply));
    return reactor;
  }

  // With job-issued certificates, whether a client whose certificate names
  // `peer` may act as rank `claimed`: UNAUTHENTICATED without one,
  // PERMISSION_DENIED with another rank's, attempt's or job's.
  grpc::Status rank_allowed(const std::optional<proto::RankIdentity>& peer, int claimed) const {
    if (!options_.rank_certificates) return grpc::Status::OK;
    if (!peer) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this job's ranks must present the client certificate the controller "
                          "issued them (IssueCertificate)");
    }
    const proto::RankIdentity expected{options_.rank_certificates->job_id(), options_.attempt,
                                       claimed};
    if (*peer == expected) return grpc::Status::OK;
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        fmt::format("the client certificate names rank {} of attempt {} of job {}; it cannot act "
                    "as rank {} of attempt {} of job {}",
                    peer->rank, peer->attempt, peer->job_id, claimed, expected.attempt,
                    expected.job_id));
  }

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest*, v1::JobStatus* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(handler_.get_status(reply));
    return reactor;
  }

  grpc::ServerUnaryReactor* Stop(grpc::CallbackServerContext* context,
                                 const v1::StopRequest* request, v1::StopReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(handler_.stop(*request, reply));
    return reactor;
  }

  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const v1::CheckpointRequest* request,
                                       v1::CheckpointReply* reply) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(handler_.checkpoint(*request, reply));
    return reactor;
  }

  SessionBase* Session(grpc::CallbackServerContext* context) override;

  // A session joins the registry unless the server is shutting down.
  bool add_session(const std::shared_ptr<SessionCore>& core) {
    std::lock_guard lock(mutex_);
    if (shutting_down_) return false;
    sessions_.insert(core);
    return true;
  }

  void remove_session(const std::shared_ptr<SessionCore>& core) {
    std::lock_guard lock(mutex_);
    sessions_.erase(core);
  }

  // Refuses new sessions and asks every open one to end.
  void begin_shutdown() {
    std::vector<std::shared_ptr<SessionCore>> open;
    {
      std::lock_guard lock(mutex_);
      shutting_down_ = true;
      open.assign(sessions_.begin(), sessions_.end());
    }
    // Outside the registry's lock: a Finish may run OnDone, which leaves it.
    for (const auto& core : open) {
      core->finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the controller is shutting down"));
    }
  }

  size_t open_sessions() const {
    std::lock_guard lock(mutex_);
    return sessions_.size();
  }

  // The identity in the client's certificate, when it presented one.
  static std::optional<proto::RankIdentity> peer_identity(
      const grpc::CallbackServerContext& context) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (!auth) return std::nullopt;
    for (const grpc::string_ref& pem : auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)) {
      return proto::identity_in_certificate(std::string_view(pem.data(), pem.size()));
    }
    return std::nullopt;
  }

 private:
  grpc::Status issue_certificate(const v1::CertificateRequest& request,
                                 v1::CertificateReply* reply) {
    const proto::JobCertificateAuthority* authority = options_.rank_certificates.get();
    if (authority == nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this controller issues no client certificates (the job has no "
                          "cluster.tls, or cluster.tls.client_certificates is false)");
    }
    if (request.restart_count() != options_.attempt) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          fmt::format("the request is for attempt {}, but this is attempt {}",
                                      request.restart_count(), options_.attempt));
    }
    if (request.rank() < 0 || request.rank() >= options_.world_size) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          fmt::format("no rank {} in this job of {} ranks", request.rank(), options_.world_size));
    }
    {
      std::lock_guard lock(mutex_);
      if (!certified_ranks_.insert(request.rank()).second) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            fmt::format("rank {} already has its certificate for attempt {}",
                                        request.rank(), options_.attempt));
      }
    }
    core::StatusOr<std::string> issued = authority->issue(
        request.request_pem(), {authority->job_id(), options_.attempt, request.rank()});
    if (!issued.ok()) {
      std::lock_guard lock(mutex_);
      certified_ranks_.erase(request.rank());  // the rank may ask again, correctly
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, issued.status().message());
    }
    reply->set_certificate_pem(std::move(*issued));
    return grpc::Status::OK;
  }

  ControllerHandler& handler_;
  const ControllerServerOptions options_;
  mutable std::mutex mutex_;
  bool shutting_down_ = false;
  std::unordered_set<std::shared_ptr<SessionCore>> sessions_;
  std::unordered_set<int> certified_ranks_;  // ranks issued a certificate
};

namespace {

// One rank's Session stream. Reads one message at a time (so the handler sees
// a rank's messages in order), writes through its SessionCore, and deletes
// itself in OnDone.
class SessionReactor final : public SessionBase {
 public:
  SessionReactor(ControllerService& service, std::optional<proto::RankIdentity> peer)
      : service_(service),
        core_(std::make_shared<SessionCore>(this, service.max_queued_commands())),
        peer_(std::move(peer)) {
    if (!service_.add_session(core_)) {
      refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the controller is shutting down"));
      return;
    }
    registered_ = true;
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The rank closed its side, or the call was cancelled or lost.
      core_->finish(grpc::Status::OK);
      return;
    }
    if (rank_ < 0) {
      if (incoming_.rank() < 0) {
        core_->finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "a session's first message must name its rank (got " +
                                       std::to_string(incoming_.rank()) + ")"));
        return;
      }
      if (grpc::Status allowed = service_.rank_allowed(peer_, incoming_.rank()); !allowed.ok()) {
        core_->finish(std::move(allowed));
        return;
      }
      rank_ = incoming_.rank();
      service_.handler().session_opened(rank_, core_);
    } else if (incoming_.rank() != rank_) {
      core_->finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "this session belongs to rank " + std::to_string(rank_) +
                                     " but a message claims rank " +
                                     std::to_string(incoming_.rank())));
      return;
    }
    if (incoming_.payload_case() != v1::WorkerMessage::PAYLOAD_NOT_SET) {
      service_.handler().worker_message(incoming_);
    }
    StartRead(&incoming_);
  }

  void OnWriteDone(bool ok) override { core_->on_write_done(ok); }

  void OnSendInitialMetadataDone(bool /*ok*/) override {
    if (refusal_) core_->finish(std::move(*refusal_));
  }

  void OnCancel() override {
    core_->finish(grpc::Status(grpc::StatusCode::CANCELLED, "the session was cancelled"));
  }

  void OnDone() override {
    if (rank_ >= 0) service_.handler().session_closed(rank_);
    if (registered_) service_.remove_session(core_);
    delete this;
  }

 private:
  // Ends a session refused in the constructor. Finishing a bidi reactor
  // before gRPC has bound it crashed now and then (a reference count
  // underflow in Debian's gRPC), so the refusal waits until the initial
  // metadata has gone out, on a bound reactor.
  void refuse(grpc::Status status) {
    refusal_ = std::move(status);
    StartSendInitialMetadata();
  }

  ControllerService& service_;
  const std::shared_ptr<SessionCore> core_;
  v1::WorkerMessage incoming_;  // owned by the one read in flight
  const std::optional<proto::RankIdentity> peer_;  // from the client's certificate
  int rank_ = -1;               // fixed by the first message
  bool registered_ = false;
  std::optional<grpc::Status> refusal_;  // set when the session is refused
};

}  // namespace

SessionBase* ControllerService::Session(grpc::CallbackServerContext* context) {
  return new SessionReactor(*this, peer_identity(*context));
}

namespace {

// Whether `address` ("host:port", port not 0) is already taken on this
// machine, found by binding a socket to it. Asked before gRPC tries: a
// failed BuildAndStart in Debian's gRPC frees the callback service's method
// handlers that the service frees again later (a double free).
bool port_taken(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port == "0") return false;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return false;  // gRPC reports the bad address itself
  }
  bool taken = false;
  for (addrinfo* a = found; a != nullptr && !taken; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    // As gRPC binds: connections of an earlier server in TIME_WAIT do not
    // make the port taken.
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    taken = bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(found);
  return taken;
}

std::optional<ServerTlsPem> read_tls_files(const ServerTls& tls, std::string& error) {
  ServerTlsPem pem;
  if (!proto::read_credential_file(tls.cert_file, pem.cert_chain, error) ||
      !proto::read_credential_file(tls.key_file, pem.private_key, error)) {
    error = "tls: " + error;
    return std::nullopt;
  }
  if (!tls.ca_file.empty() && !proto::read_credential_file(tls.ca_file, pem.client_ca, error)) {
    error = "tls.ca: " + error;
    return std::nullopt;
  }
  return pem;
}

int milliseconds(std::chrono::milliseconds duration) { return static_cast<int>(duration.count()); }

}  // namespace

ControllerServer::ControllerServer(ControllerHandler& handler, ControllerServerOptions options)
    : service_(std::make_unique<ControllerService>(handler, std::move(options))),
      refused_(std::make_shared<RefusalCount>(0)) {}

ControllerServer::~ControllerServer() { shutdown(std::chrono::milliseconds(0)); }

StartResult ControllerServer::start(const std::string& address) {
  StartResult result;
  if (server_ != nullptr || shut_down_) {
    result.error = "the controller server was already started";
    return result;
  }
  const ControllerServerOptions& options = service_->options();
  if (options.token.empty()) {
    result.error = "the controller needs a job token to authenticate its calls";
    return result;
  }
  std::optional<ServerTlsPem> tls;
  if (options.tls) {
    tls = read_tls_files(*options.tls, result.error);
    if (!tls) return result;
    if (options.rank_certificates) {
      tls->client_ca = options.rank_certificates->certificate_pem();
      tls->client_certificate_optional = true;
    }
  }
  const std::shared_ptr<grpc::ServerCredentials> credentials =
      token_checked_credentials(tls, options.token, refused_);

  if (port_taken(address)) {
    result.error = "cannot listen on " + address +
                   ": the port is in use, or the host is not an address of this machine";
    return result;
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, credentials, &result.port);
  builder.RegisterService(service_.get());
  // gRPC sets SO_REUSEPORT by default, which would let two controllers share
  // one port and split the ranks' calls between them.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, milliseconds(proto::kKeepaliveTime));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, milliseconds(proto::kKeepaliveTimeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             milliseconds(kMinClientPingInterval));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, kMaxPingStrikes);
  builder.SetMaxReceiveMessageSize(static_cast<int>(proto::kMaxMessageBytes));
  builder.SetMaxSendMessageSize(static_cast<int>(proto::kMaxMessageBytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, milliseconds(kMaxConnectionIdle));
  grpc::ResourceQuota quota("dslaunch-controller");
  quota.Resize(kMemoryQuotaBytes);
  builder.SetResourceQuota(quota);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || result.port == 0) {
    server_.reset();
    result.port = 0;
    result.error = "cannot listen on " + address +
                   ": the port is in use, or the host is not an address of this machine";
  }
  return result;
}

void ControllerServer::shutdown(std::chrono::milliseconds grace) {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ == nullptr) return;
  service_->begin_shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
}

size_t ControllerServer::open_sessions() const { return service_->open_sessions(); }

int64_t ControllerServer::refused_calls() const {
  return refused_->load(std::memory_order_relaxed);
}

}  // namespace dslaunch::controller
