#include "launcher/controller/token_credentials.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "proto/auth.h"

namespace dslaunch::controller {
namespace {

struct TokenCheck {
  std::string token;
  std::shared_ptr<RefusalCount> refused;
};

std::string_view text(const grpc_slice& slice) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)), GRPC_SLICE_LENGTH(slice)};
}

// Cheap and non-blocking, so gRPC runs it inline on the transport's thread.
void check_token(void* state, grpc_auth_context* /*peer*/, const grpc_metadata* metadata,
                 size_t count, grpc_process_auth_metadata_done_cb done, void* call) {
  const TokenCheck& check = *static_cast<const TokenCheck*>(state);
  const grpc_metadata* end = metadata + count;
  const grpc_metadata* entry = std::find_if(metadata, end, [](const grpc_metadata& m) {
    return text(m.key) == proto::kAuthorizationKey;
  });
  const char* refusal = nullptr;
  if (entry == end) {
    refusal =
        "no job token: every call must carry 'authorization: Bearer <token>' (the token is in "
        "the job directory and in the ranks' environment)";
  } else if (!proto::authorization_matches(text(entry->value), check.token)) {
    refusal = "wrong job token: this controller runs another job";
  }
  if (refusal != nullptr) {
    check.refused->fetch_add(1, std::memory_order_relaxed);
    done(call, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, refusal);
    return;
  }
  done(call, entry, 1, nullptr, 0, GRPC_STATUS_OK, nullptr);
}

void destroy_token_check(void* state) { delete static_cast<TokenCheck*>(state); }

grpc_server_credentials* core_credentials(const std::optional<ServerTlsPem>& tls) {
  if (!tls) return grpc_insecure_server_credentials_create();
  grpc_ssl_pem_key_cert_pair pair{tls->private_key.c_str(), tls->cert_chain.c_str()};
  const bool verify_clients = !tls->client_ca.empty();
  return grpc_ssl_server_credentials_create_ex(
      verify_clients ? tls->client_ca.c_str() : nullptr, &pair, 1,
      !verify_clients ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
      : tls->client_certificate_optional
          ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
      nullptr);
}

// Credentials made with gRPC's C API, with the token check, in the
// grpc::ServerCredentials that grpc::ServerBuilder takes.
class TokenCheckedCredentials final : public grpc::ServerCredentials {
 public:
  // The base class has initialised gRPC before core_ is made.
  TokenCheckedCredentials(const std::optional<ServerTlsPem>& tls, TokenCheck check)
      : core_(core_credentials(tls)) {
    grpc_server_credentials_set_auth_metadata_processor(
        core_, {check_token, destroy_token_check, new TokenCheck(std::move(check))});
  }
  ~TokenCheckedCredentials() override { grpc_server_credentials_release(core_); }

  // The token check is fixed at construction; another processor would
  // replace it and let unchecked calls through.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    std::abort();
  }

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    return grpc_server_add_http2_port(server, address.c_str(), core_);
  }

  grpc_server_credentials* const core_;
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> token_checked_credentials(
    const std::optional<ServerTlsPem>& tls, std::string token,
    std::shared_ptr<RefusalCount> refused) {
  return std::make_shared<TokenCheckedCredentials>(
      tls, TokenCheck{std::move(token), std::move(refused)});
}

}  // namespace dslaunch::controller
