#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

// Mutual TLS on the control plane with certificates the job issues itself:
// the controller makes a certificate authority when the job starts; each
// rank makes a key pair, sends a certificate request (over TLS that checks
// the controller, with the job token) and gets back a certificate naming
// its job, attempt and rank; its session then proves that identity, so a
// rank can claim only its own rank. Keys never leave the process that made
// them. EC P-256 keys, SHA-256 signatures (OpenSSL's libcrypto).
namespace dslaunch::proto {

// What an issued certificate says of its holder, as the URI in its subject
// alternative name: dslaunch://job/<job_id>/attempt/<attempt>/rank/<rank>.
struct RankIdentity {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  bool operator==(const RankIdentity&) const = default;
};

std::string identity_uri(const RankIdentity& identity);

// The identity in a PEM certificate's URI names; nullopt when it has none
// (or the text is no certificate). Says nothing of who signed it: the TLS
// handshake checked that.
std::optional<RankIdentity> identity_in_certificate(std::string_view certificate_pem);

// A new private key and a certificate request for it, both PEM.
struct KeyAndRequest {
  std::string private_key_pem;
  std::string request_pem;
};
core::StatusOr<KeyAndRequest> make_key_and_request(const std::string& common_name);

// One job's certificate authority: a key and a self-signed certificate made
// in memory, valid for 30 days (longer than any job between restarts of its
// controller, which makes a new one). Thread-safe once made.
class JobCertificateAuthority {
 public:
  static core::StatusOr<std::unique_ptr<JobCertificateAuthority>> create(std::string job_id);
  ~JobCertificateAuthority();

  const std::string& job_id() const { return job_id_; }
  const std::string& certificate_pem() const { return certificate_pem_; }

  // A client certificate for `identity` (whose job must be this one) over the
  // public key of `request_pem`, whose own signature must verify. Its subject
  // and names come from `identity` alone, never from the request.
  core::StatusOr<std::string> issue(std::string_view request_pem,
                                    const RankIdentity& identity) const;

 private:
  struct Keys;
  JobCertificateAuthority(std::string job_id, std::unique_ptr<Keys> keys, std::string pem);

  std::string job_id_;
  std::unique_ptr<Keys> keys_;
  std::string certificate_pem_;
};

}  // namespace dslaunch::proto
