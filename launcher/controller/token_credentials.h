#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

// Server credentials that check every call's job token in gRPC's core, as the
// call's headers arrive, before gRPC reads the request body.
//
// Why not in the service: by the time a handler (or a C++ server interceptor)
// runs, gRPC has already read the request, up to the message size limit, and
// parsed it, so a caller without the token could make the controller buffer
// and parse a 64 MiB message per call. An auth metadata processor runs in the
// transport's auth filter, on the headers alone. gRPC's C++
// InsecureServerCredentials() cannot take one (it asserts), so plaintext and
// TLS credentials are both made through gRPC's C API and wrapped here.
namespace dslaunch::controller {

// The controller's TLS material, in PEM, already read from its files.
struct ServerTlsPem {
  std::string cert_chain;
  std::string private_key;
  std::string client_ca;  // empty: clients need no certificate
  // With client_ca: a client may come without a certificate (the service
  // decides which calls need one); one it presents must still verify.
  bool client_certificate_optional = false;
};

// Calls refused for a missing or wrong token; shared because gRPC's core may
// keep the credentials after the server is gone.
using RefusalCount = std::atomic<int64_t>;

// Plaintext credentials, or TLS ones with `tls`, that refuse every call not
// carrying "authorization: Bearer <token>" with UNAUTHENTICATED and count it
// in `refused`. An accepted call's authorization entry is removed, so the
// service never sees the token. `token` must not be empty.
std::shared_ptr<grpc::ServerCredentials> token_checked_credentials(
    const std::optional<ServerTlsPem>& tls, std::string token,
    std::shared_ptr<RefusalCount> refused);

}  // namespace dslaunch::controller
