#include "proto/controller_client.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

#include "proto/auth.h"
#include "proto/grpc_status.h"
#include "proto/message_limits.h"

namespace dslaunch::proto {

namespace detail {

// The callback-API half of a Session. Writes come from application threads
// (send), so the reactor holds the call open with a hold until it will issue
// no more writes: after StartWritesDone, or once the stream has ended.
// Whoever flips write_in_flight_ to true under the mutex owns the next
// StartWrite; the hold keeps the call open until then.
// The Session owns it and destroys it on the Session's thread, after OnDone
// has finished with it (Session waits for that in close()). It must never be
// destroyed on one of gRPC's threads: its ClientContext holds a reference to
// the channel, and a channel's last release there can shut down and free the
// completion queue that very thread keeps polling (a crash in a later call).
class SessionReactor final
    : public grpc::ClientBidiReactor<v1::WorkerMessage, v1::ControllerCommand> {
 public:
  SessionReactor(int rank, size_t max_queued, ControllerClient::CommandCallback on_command,
                 ControllerClient::EndCallback on_end)
      : rank_(rank),
        max_queued_(max_queued),
        on_command_(std::move(on_command)),
        on_end_(std::move(on_end)) {}

  grpc::ClientContext& context() { return context_; }

  // Starts the call on `stub`, with the announcement as its first message.
  void start(v1::Controller::Stub& stub) {
    stub.async()->Session(&context_, this);
    AddHold();
    StartRead(&incoming_);
    v1::WorkerMessage hello;
    send(std::move(hello));
    StartCall();
  }

  // Ends a session that never reached the wire (the client is unusable).
  void end_unstarted(const core::Status& status) {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
      final_status_ = status;
    }
    if (on_end_) on_end_(status);
    std::lock_guard lock(mutex_);
    done_ = true;
    done_cv_.notify_all();
  }

  bool send(v1::WorkerMessage message) {
    message.set_rank(rank_);
    const v1::WorkerMessage* next = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (closing_ || read_done_ || write_failed_ || queue_.size() >= max_queued_) return false;
      queue_.push_back(std::move(message));
      if (write_in_flight_) return true;
      write_in_flight_ = true;
      next = &queue_.front();  // deque: pushes at the back keep this reference valid
    }
    StartWrite(next);
    return true;
  }

  void begin_close() {
    bool writes_done = false;
    bool release = false;
    {
      std::lock_guard lock(mutex_);
      if (closing_) return;
      closing_ = true;
      if (!write_in_flight_ && !read_done_ && !write_failed_) writes_done = writes_done_ = true;
      release = release_hold_locked();
    }
    if (writes_done) StartWritesDone();
    if (release) RemoveHold();
  }

  void cancel() { context_.TryCancel(); }

  std::optional<core::Status> wait_for_end(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) return std::nullopt;
    return final_status_;
  }

  core::Status wait_for_end() {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    return final_status_;
  }

  bool ended() const {
    std::lock_guard lock(mutex_);
    return done_;
  }

  int rank() const { return rank_; }

  void OnWriteDone(bool ok) override {
    const v1::WorkerMessage* next = nullptr;
    bool writes_done = false;
    bool release = false;
    {
      std::lock_guard lock(mutex_);
      queue_.pop_front();
      if (!ok) write_failed_ = true;
      if (!ok || read_done_) queue_.clear();
      if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        write_in_flight_ = false;
        if (closing_ && !writes_done_ && !read_done_ && !write_failed_) {
          writes_done = writes_done_ = true;
        }
        release = release_hold_locked();
      }
    }
    if (next != nullptr) StartWrite(next);
    if (writes_done) StartWritesDone();
    if (release) RemoveHold();
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      if (on_command_) on_command_(incoming_);
      StartRead(&incoming_);
      return;
    }
    // The controller finished the stream, or the connection is gone: no more
    // writes will be started, so the call may end once the last one returns.
    bool release = false;
    {
      std::lock_guard lock(mutex_);
      read_done_ = true;
      release = release_hold_locked();
    }
    if (release) RemoveHold();
  }

  void OnDone(const grpc::Status& done) override {
    const core::Status status = from_grpc(done);
    {
      std::lock_guard lock(mutex_);
      final_status_ = status;
    }
    if (on_end_) on_end_(status);
    // The last touch of this object: once done_ is seen, the Session may
    // destroy it.
    std::lock_guard lock(mutex_);
    done_ = true;
    done_cv_.notify_all();
  }

 private:
  // The hold goes once no write is in flight and none can start again.
  bool release_hold_locked() {
    if (hold_released_ || write_in_flight_) return false;
    if (!(writes_done_ || read_done_ || write_failed_)) return false;
    hold_released_ = true;
    return true;
  }

  const int rank_;
  const size_t max_queued_;
  const ControllerClient::CommandCallback on_command_;
  const ControllerClient::EndCallback on_end_;
  grpc::ClientContext context_;
  v1::ControllerCommand incoming_;  // owned by the one read in flight

  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  std::deque<v1::WorkerMessage> queue_;  // front() is being written while write_in_flight_
  bool write_in_flight_ = false;
  bool closing_ = false;
  bool writes_done_ = false;
  bool read_done_ = false;
  bool write_failed_ = false;
  bool hold_released_ = false;
  bool done_ = false;
  core::Status final_status_;
};

}  // namespace detail

Session::Session(std::shared_ptr<grpc::Channel> channel,
                 std::unique_ptr<detail::SessionReactor> reactor)
    : channel_(std::move(channel)), reactor_(std::move(reactor)) {}

// A destructor has no one to report the final status to.
Session::~Session() { (void)close(); }

bool Session::send(v1::WorkerMessage message) { return reactor_->send(std::move(message)); }

core::Status Session::close(std::chrono::milliseconds timeout) {
  reactor_->begin_close();
  if (std::optional<core::Status> status = reactor_->wait_for_end(timeout)) return *status;
  // The controller did not finish the stream in time; a cancelled call always
  // reaches OnDone promptly.
  reactor_->cancel();
  return reactor_->wait_for_end();
}

std::optional<core::Status> Session::wait_for_end(std::chrono::milliseconds timeout) {
  return reactor_->wait_for_end(timeout);
}

bool Session::ended() const { return reactor_->ended(); }

int Session::rank() const { return reactor_->rank(); }

namespace {

grpc::ChannelArguments channel_arguments(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Keep pinging however long the connection carries no data (the default
  // stops after 2 pings), so an idle session still notices a lost controller.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // The controller's limits, so a large reply (a resolved spec, a big job's
  // status) is accepted and a request too large for the controller is refused
  // here, before it is sent.
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxMessageBytes));
  if (options.private_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (options.tls && !options.tls->server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls->server_name);
  }
  return args;
}

core::Status tls_credentials(const ClientTls& tls,
                             std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::SslCredentialsOptions ssl;
  std::string error;
  if (!read_credential_file(tls.ca_file, ssl.pem_root_certs, error)) {
    return core::failed_precondition("tls.ca: " + error);
  }
  if (tls.cert_file.empty() != tls.key_file.empty() ||
      tls.cert_pem.empty() != tls.key_pem.empty()) {
    return core::failed_precondition("tls: a client certificate needs both cert and key");
  }
  if (!tls.cert_pem.empty()) {
    ssl.pem_cert_chain = tls.cert_pem;
    ssl.pem_private_key = tls.key_pem;
  } else if (!tls.cert_file.empty()) {
    if (!read_credential_file(tls.cert_file, ssl.pem_cert_chain, error) ||
        !read_credential_file(tls.key_file, ssl.pem_private_key, error)) {
      return core::failed_precondition("tls: " + error);
    }
  }
  credentials = grpc::SslCredentials(ssl);
  return {};
}

}  // namespace

ControllerClient::ControllerClient(std::string address, std::string token, ClientOptions options)
    : address_(std::move(address)), token_(std::move(token)), options_(std::move(options)) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options_.tls) status_ = tls_credentials(*options_.tls, credentials);
  if (!status_.ok()) return;
  channel_ = grpc::CreateCustomChannel(address_, credentials, channel_arguments(options_));
  stub_ = v1::Controller::NewStub(channel_);
}

void ControllerClient::prepare(grpc::ClientContext& context, bool with_deadline) const {
  context.AddMetadata(std::string(kAuthorizationKey), bearer_value(token_));
  if (with_deadline) context.set_deadline(std::chrono::system_clock::now() + options_.deadline);
}

core::Status ControllerClient::register_rank(const v1::RegisterRequest& request,
                                             v1::RegisterReply* reply) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  prepare(context, true);
  return from_grpc(stub_->Register(&context, request, reply));
}

core::Status ControllerClient::issue_certificate(const v1::CertificateRequest& request,
                                                 v1::CertificateReply* reply) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  prepare(context, true);
  return from_grpc(stub_->IssueCertificate(&context, request, reply));
}

core::Status ControllerClient::get_status(v1::JobStatus* status) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  prepare(context, true);
  return from_grpc(stub_->GetStatus(&context, v1::GetStatusRequest(), status));
}

core::Status ControllerClient::stop(const v1::StopRequest& request, v1::StopReply* reply) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  prepare(context, true);
  return from_grpc(stub_->Stop(&context, request, reply));
}

core::Status ControllerClient::checkpoint(v1::CheckpointReply* reply) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  prepare(context, true);
  return from_grpc(stub_->Checkpoint(&context, v1::CheckpointRequest(), reply));
}

std::unique_ptr<Session> ControllerClient::open_session(int rank, CommandCallback on_command,
                                                        EndCallback on_end) {
  auto reactor = std::make_unique<detail::SessionReactor>(rank, options_.max_queued_messages,
                                                          std::move(on_command), std::move(on_end));
  if (!status_.ok()) {
    reactor->end_unstarted(status_);
  } else {
    prepare(reactor->context(), false);
    reactor->start(*stub_);
  }
  return std::unique_ptr<Session>(new Session(channel_, std::move(reactor)));
}

}  // namespace dslaunch::proto
